"""Ctrl-C in the main thread while it waits (sparkctl/waits.py): the signal is taken by another
thread, as the kernel may deliver a process's SIGINT to any of them. A wait without a deadline in
a lock would sleep on until what it waits for happens; sparkctl's waits raise KeyboardInterrupt
within a slice."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future

import pytest

from sparkctl import waits


def interrupted_while(wait_forever) -> float:
    """Seconds from a SIGINT delivered to a worker thread to the main thread's KeyboardInterrupt."""
    ready, gone = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (ready.set(), gone.wait(30)), daemon=True)
    worker.start()
    ready.wait(5)
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(worker.ident, signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            wait_forever()
        return time.monotonic() - start - 0.3
    finally:
        gone.set()
        timer.cancel()


@pytest.mark.parametrize("kind", ["event", "futures", "join"])
def test_a_sigint_another_thread_took_breaks_the_main_threads_wait_at_once(kind):
    never = threading.Event()
    blocked = threading.Thread(target=lambda: never.wait(30), daemon=True)
    blocked.start()
    wait = {
        "event": lambda: waits.event(never),
        "futures": lambda: waits.futures([Future()]),
        "join": lambda: waits.join(blocked),
    }[kind]
    try:
        assert interrupted_while(wait) < 5 * waits.SLICE_S + 1.0  # a wait in a lock would sleep 30 s
    finally:
        never.set()


def test_they_wait_as_the_standard_ones_do():
    ev = threading.Event()
    assert waits.event(ev, timeout=0.2) is False
    threading.Timer(0.1, ev.set).start()
    assert waits.event(ev, timeout=5) is True
    f: Future = Future()
    threading.Timer(0.1, lambda: f.set_result(1)).start()
    done, pending = waits.futures([f, Future()], timeout=0.5)
    assert done == {f} and len(pending) == 1
    t = threading.Thread(target=time.sleep, args=(0.1,))
    t.start()
    assert waits.join(t, timeout=5) and not t.is_alive()
