"""Waits that Ctrl-C can break in the main thread.

A signal sent to the process may be taken by any of its threads, and CPython runs its Python
handler (KeyboardInterrupt) in the main thread, the next time that thread runs Python code. A main
thread blocked without a deadline in a lock (Event.wait(), Thread.join(), concurrent.futures.wait())
wakes only when the signal came to it; otherwise it sleeps on until what it waits for happens: a
host's whole connect timeout, as `doctor` Ctrl-C'd against silent hosts now and then took 20 s.
These wait in slices of SLICE_S, so the main thread looks for a signal at least that often.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from typing import Any, Optional

SLICE_S = 0.1


def _slices(timeout: Optional[float]) -> Iterable[float]:
    """Slice lengths until `timeout` s have gone by (forever without one)."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE_S if end is None else min(SLICE_S, end - time.monotonic())
        if left <= 0:
            return
        yield left


def event(ev: threading.Event, timeout: Optional[float] = None) -> bool:
    """Event.wait: True once set, False when `timeout` s went by first."""
    return any(ev.wait(s) for s in _slices(timeout)) or ev.is_set()


def futures(fs: Iterable[Future[Any]], timeout: Optional[float] = None) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """concurrent.futures.wait (all of them): (done, not done) once all are done or `timeout` s went by."""
    pending = set(fs)
    done: set[Future[Any]] = set()
    for s in _slices(timeout):
        finished, pending = wait_all(pending, timeout=s)
        done |= finished
        if not pending:
            break
    return done, pending


def join(thread: threading.Thread, timeout: Optional[float] = None) -> bool:
    """Thread.join: True once the thread ended, False when `timeout` s went by first."""
    for s in _slices(timeout):
        thread.join(s)
        if not thread.is_alive():
            return True
    return not thread.is_alive()
