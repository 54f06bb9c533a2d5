"""`--version` of hostcapd and hostcapctl. Apart from `build`, which every
process of the daemon imports for its version (a front-end among them),
because argparse costs each such process 0.4 MiB of RSS it never uses."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from hostcap_proto.build import describe


class VersionAction(argparse.Action):
    """--version of hostcapd and hostcapctl: `line()` printed as is
    (argparse's own version action would wrap it at the terminal's width)."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str = argparse.SUPPRESS,
        line: Callable[[], str] = describe,
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS,
            help="print the version and the commit of this build, and exit",
        )  # fmt: skip
        self.line = line

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(self.line())
        parser.exit()
