"""Cancellation and deadlines around each awaited step of a dispatch.

An abort that already happened refuses entry (`refuse_if_cancelled`); an
awaited step (a host call, a prompt, a spill) is raced against the signal
and, when the signal wins, cancelled and waited for, so a process tree is
gone before `dispatch` returns (`guarded`). A `host_call_options` deadline
bounds the host call (`within_deadline`).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from hostcap.errors import HostError, ToolCancelledError, ToolDispatchError

if TYPE_CHECKING:
    from hostcap.dispatch_context import DispatchContext

T = TypeVar("T")
#: How long past a `host_call_options` deadline the registry waits for the
#: host to report it before abandoning the call itself.
DEADLINE_GRACE_S = 5.0


def cancel_wins(error: ToolDispatchError, signal: asyncio.Event | None) -> ToolDispatchError:
    """`error`, or the cancellation that outranks it: a refusal or failure
    reported while the signal is set is a ToolCancelledError (the seed's
    "cancel wins ahead of all other classifications"). Every awaited step
    has settled by then, so the host call is over."""
    if signal is None or not signal.is_set() or isinstance(error, ToolCancelledError):
        return error
    cancelled = ToolCancelledError(tool_id=error.tool_id)
    cancelled.__cause__ = error
    return cancelled


def refuse_if_cancelled(ctx: DispatchContext, tool_id: str | None) -> None:
    # An abort that already happened refuses entry: nothing is started after it.
    if ctx.signal is not None and ctx.signal.is_set():
        raise ToolCancelledError(tool_id=tool_id)


async def guarded(work: Awaitable[T], signal: asyncio.Event | None, tool_id: str) -> T:
    """Await `work`, cancelling it when `signal` fires (ToolCancelledError).

    The caller's own cancellation is never swallowed: it cancels `work`,
    waits for it to finish (so a process tree is gone before we return) and
    propagates. A CancelledError out of `work` while the caller is not being
    cancelled (the host call itself was cancelled) is a ToolCancelledError.

    Cancel wins: when the signal is set by the time `work` has settled (the
    abort and a result or a host error landing in the same step), the
    outcome is ToolCancelledError, whatever `work` returned or raised.
    """
    task = asyncio.ensure_future(work)
    current = asyncio.current_task()
    waiter: asyncio.Future[Any] | None = (
        asyncio.ensure_future(signal.wait()) if signal is not None else None
    )
    try:
        waiting: set[asyncio.Future[Any]] = {task} if waiter is None else {task, waiter}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await cancel_and_wait(task)
        raise
    finally:
        if waiter is not None:
            waiter.cancel()
    if not task.done():
        # The signal fired first; the host call settles before we return.
        await cancel_and_wait(task)
        raise ToolCancelledError(tool_id=tool_id, detail=cancel_detail(task))
    if task.cancelled():
        if current is not None and current.cancelling():
            raise asyncio.CancelledError
        raise ToolCancelledError(tool_id=tool_id, detail="the host call was cancelled")
    if signal is not None and signal.is_set():
        # Settled in the same step as the abort: the abort is what is reported.
        raise ToolCancelledError(tool_id=tool_id, detail=cancel_detail(task))
    return task.result()


def cancel_detail(task: asyncio.Future[Any]) -> str:
    """What a cancelled host call said about its end (a host that could not
    confirm the process tree is gone says so in its CancelledError)."""
    try:
        task.result()
    except asyncio.CancelledError as error:
        if error.args and isinstance(error.args[0], str) and error.args[0]:
            return f"the call was cancelled, but {error.args[0]}"
    except Exception:  # retrieved; the cancel is what is reported
        pass
    return "the call was cancelled"


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has unwound (the RPC cancelled, the tree
    killed), even when the caller is cancelled meanwhile; that cancellation is
    re-raised once the work is gone, never dropped."""
    task.cancel()
    interrupted = False
    while not task.done():
        try:
            await asyncio.shield(asyncio.wait({task}))
        except asyncio.CancelledError:
            interrupted = True
    if not task.cancelled():
        task.exception()  # retrieved, so it is not reported as never retrieved
    if interrupted:
        raise asyncio.CancelledError


async def within_deadline(work: Awaitable[T], deadline: float) -> T:
    """`work`, abandoned a grace period after `deadline` when the host has not
    reported the deadline itself (the host gets it as its RPC deadline)."""
    remaining = deadline - time.time()
    if remaining <= 0:
        if inspect.iscoroutine(work):
            work.close()
        raise HostError("DEADLINE_EXCEEDED", "the deadline passed before the call")
    try:
        return await asyncio.wait_for(work, remaining + DEADLINE_GRACE_S)
    except TimeoutError:
        raise HostError("DEADLINE_EXCEEDED", "the host call passed its deadline") from None
