"""Build of the one C part: the child's set-up between clone and exec."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hostcapd._childsetup",
            sources=["daemon/hostcapd/_childsetup.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror", "-O2", "-std=gnu11"],
        )
    ]
)
