"""The running event loop, kept once asked.

`asyncio.get_running_loop()` is a getpid(2) on Python 3.11, and the root's
spawn path asked it some nine times a spawn. Each holder keeps the loop it
was last called on and asks asyncio again only when that one is not
running (a test's next loop, a restart): the root has one loop, on one
thread, and every holder is used from that thread only.

    running_loop = KeptLoop()
    running_loop().call_soon(...)   # RuntimeError if no loop runs
"""

from __future__ import annotations

import asyncio


class KeptLoop:
    """A callable giving the running loop (see the module)."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop
