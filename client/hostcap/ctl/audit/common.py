"""What every ``hostcapctl audit`` command shares: exit codes, the handler
type, the error line and the admin socket option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK = 0
#: The chain is broken (verify), or a record could not be read.
EXIT_BROKEN = 1
#: Bad usage or an unreadable file.
EXIT_ERROR = 2

Handler = Callable[[argparse.Namespace], int]


def _error(message: str) -> int:
    sys.stderr.write(f"hostcapctl audit: {message}\n")
    return EXIT_ERROR


def _admin_socket(args: argparse.Namespace) -> Any:
    # None when run as `python -m hostcap.ctl.audit` (no global options).
    return getattr(args, "admin_socket", None)
