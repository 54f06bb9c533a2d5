"""Build of the one C part: the child's set-up between clone and exec, one
extension (`hostcapd._childsetup`) from the files of daemon/hostcapd/childsetup_c/."""

from pathlib import Path

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hostcapd._childsetup",
            sources=sorted(str(p) for p in Path("daemon/hostcapd/childsetup_c").glob("*.c")),
            depends=sorted(str(p) for p in Path("daemon/hostcapd/childsetup_c").glob("*.h")),
            # Hidden: the files share functions, the module exports only PyInit.
            extra_compile_args=[
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O2",
                "-std=gnu11",
                "-fvisibility=hidden",
            ],
        )
    ]
)
