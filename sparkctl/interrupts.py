"""How a signal becomes KeyboardInterrupt in sparkctl's main thread: Ctrl-C in every run, and SIGTERM
and SIGHUP (a closed terminal, a dropped SSH session to the control host) while a run changes the
cluster, so its lock is released and a rollout's report still says where each member is.

CPython runs a Python signal handler in the main thread at its next bytecode boundary, wherever
that is. Inside the import machinery that can be a weakref callback (`_get_module_lock`'s `cb`)
just after it took the import lock: the KeyboardInterrupt is printed as "Exception ignored" and lost,
and the import lock stays held, so a thread importing lazily waits forever and the main thread joins
it forever (ci23: a Ctrl-C'd `up --check` hung). A signal that arrives there is raised RETRY_S later
instead, once the main thread has left the import machinery (SIGALRM brings it back).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Coroutine, Optional, TypeVar

T = TypeVar("T")

RETRY_S = 0.02
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
_TERMINATION = (signal.SIGTERM, signal.SIGHUP)

_deferred: Optional[int] = None  # the signal that came inside the import machinery, not yet raised


def raise_interrupt(signum: int, frame: Optional[FrameType]) -> None:
    """The handler: KeyboardInterrupt ("signal N" for SIGTERM and SIGHUP), outside the import machinery."""
    global _deferred
    if signum == signal.SIGALRM:  # the retry of a deferred one
        if _deferred is None:
            return
        signum = _deferred
    if frame is not None and frame.f_code.co_filename in _IMPORT_MACHINERY:
        _deferred = signum
        signal.signal(signal.SIGALRM, raise_interrupt)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    _deferred = None
    raise _interrupt(signum)


def _interrupt(signum: int) -> KeyboardInterrupt:
    """Ctrl-C said as Python says it ("interrupted"); SIGTERM and SIGHUP by number."""
    return KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(f"signal {signum}")


def on_ctrl_c() -> None:
    """The console script's Ctrl-C (called in the main thread, before the command runs)."""
    signal.signal(signal.SIGINT, raise_interrupt)


def on_termination() -> dict[int, Any]:
    """SIGTERM and SIGHUP end the run like Ctrl-C until `restore(previous)`; the handlers they had.
    Only the main thread may set handlers: elsewhere (a command run in a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, raise_interrupt) for sig in _TERMINATION}


def restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), ended by a signal only at an await: the main task is cancelled, every await
    unwinds in order, and KeyboardInterrupt is raised once it has. Raised at any bytecode inside the
    loop instead (raise_interrupt), the interrupt could leave httpx's anyio cancel scopes out of
    order, ending the run in a traceback ("Attempted to exit a cancel scope that isn't the current
    tasks's current cancel scope"), not 130 (ci62). Ctrl-C always; SIGTERM and SIGHUP where
    on_termination() made them end the run. A second signal, or one before the task runs, is raised
    at once, as raise_interrupt does."""
    import asyncio

    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    ending = [signal.SIGINT, *(sig for sig in _TERMINATION if signal.getsignal(sig) is raise_interrupt)]
    ended_by: list[int] = []
    running: list[asyncio.Task] = []  # the main task, once asyncio.run has started it

    def cancel(signum: int, frame: Optional[FrameType]) -> None:
        ended_by.append(signum)
        if len(ended_by) > 1 or not running or running[0].done():
            raise_interrupt(signum, frame)
            return
        running[0].cancel()
        running[0].get_loop().call_soon_threadsafe(lambda: None)  # wakes a loop asleep in select()

    async def cancellable() -> T:
        task = asyncio.current_task()
        if task is not None:
            running.append(task)
        return await main

    previous: dict[int, Any] = {sig: signal.signal(sig, cancel) for sig in ending}
    try:
        result = asyncio.run(cancellable())
    except asyncio.CancelledError:
        if not ended_by:
            raise
    finally:
        restore(previous)
    if ended_by:  # also when the coroutine took the cancellation and returned: the run still ends
        raise _interrupt(ended_by[0])
    return result
