"""How a signal becomes KeyboardInterrupt (sparkctl/interrupts.py): at once in sparkctl's own code,
and never inside the import machinery, where CPython loses it in a weakref callback and leaves the
import lock held (ci23: a Ctrl-C'd `up --check` hung with a thread waiting on that lock).

The handler is called as CPython calls it, with the main thread's current frame: a real frame of
`<frozen importlib._bootstrap>`, taken by a finder while an import runs."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import time
from types import FrameType

import pytest

from sparkctl import interrupts


@pytest.fixture
def handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGHUP)}
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    interrupts.restore(saved)


class FrameTaker:
    """A finder that keeps the import machinery's frame that asked it, and finds nothing."""

    frame: FrameType | None = None

    def find_spec(self, name, path=None, target=None):
        if name == "sparkctl_no_such_module":
            self.frame = sys._getframe(1)
        return None


def import_machinery_frame() -> FrameType:
    taker = FrameTaker()
    sys.meta_path.insert(0, taker)
    try:
        with pytest.raises(ImportError):
            importlib.import_module("sparkctl_no_such_module")
    finally:
        sys.meta_path.remove(taker)
    assert taker.frame is not None and taker.frame.f_code.co_filename.startswith("<frozen importlib")
    return taker.frame


def test_ctrl_c_in_sparkctls_own_code_is_raised_at_once(handlers):
    with pytest.raises(KeyboardInterrupt) as ki:
        interrupts.raise_interrupt(signal.SIGINT, sys._getframe())
    assert ki.value.args == ()  # said as "interrupted", like Python's own Ctrl-C
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        interrupts.raise_interrupt(signal.SIGTERM, sys._getframe())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_the_import_machinery_is_raised_once_the_main_thread_left_it(handlers, signum):
    frame = import_machinery_frame()
    interrupts.raise_interrupt(signum, frame)  # returns: nothing raised inside importlib
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as ki:
        while time.monotonic() - started < 5:
            time.sleep(0.001)
    assert time.monotonic() - started < 1  # RETRY_S (0.02 s) later, not lost
    assert ki.value.args == (() if signum == signal.SIGINT else (f"signal {signum}",))
    # raised once: the next retry finds nothing deferred
    interrupts.raise_interrupt(signal.SIGALRM, sys._getframe())


def test_termination_signals_end_a_run_only_between_on_termination_and_restore(handlers):
    previous = interrupts.on_termination()
    assert signal.getsignal(signal.SIGTERM) is interrupts.raise_interrupt
    assert signal.getsignal(signal.SIGHUP) is interrupts.raise_interrupt
    interrupts.restore(previous)
    assert signal.getsignal(signal.SIGTERM) is previous[signal.SIGTERM]


def test_the_console_scripts_ctrl_c_is_this_handler():
    """The process sparkctl runs in takes Ctrl-C through it (the in-process `main(argv)` leaves the
    caller's handler alone)."""
    probe = (
        "import signal, sys\n"
        "from sparkctl import interrupts\n"
        "from sparkctl.cli import app\n"
        "sys.argv = ['sparkctl', '--version']\n"
        "try:\n"
        "    app.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(signal.getsignal(signal.SIGINT) is interrupts.raise_interrupt)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[-1] == "True", out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_inside_run_async_a_signal_ends_the_run_at_the_next_await_not_inside_the_code_between(handlers, signum):
    """The bench and the throughput step (inside `up` and `reload`, where SIGTERM and SIGHUP end the
    run) run httpx's async client: an interrupt raised between two awaits, inside its anyio cancel
    scopes, ended a bench in a traceback and exit 1 (ci62). A signal inside run_async cancels the
    task instead: the code between awaits runs to its end, the awaits unwind, then KeyboardInterrupt."""
    import asyncio

    saved_int = signal.getsignal(signal.SIGINT)
    interrupts.on_ctrl_c()
    previous = interrupts.on_termination()
    steps: list[str] = []

    async def run() -> None:
        try:
            signal.raise_signal(signum)  # the handler runs at the next bytecode: here, not at an await
            steps.append("the code after the signal, to the next await")
            await asyncio.sleep(30)
            steps.append("after the await")
        except asyncio.CancelledError:
            steps.append("cancelled at the await")
            raise

    try:
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt) as ki:
            interrupts.run_async(run())
        assert time.monotonic() - started < 5
        assert steps == ["the code after the signal, to the next await", "cancelled at the await"]
        assert ki.value.args == (() if signum == signal.SIGINT else (f"signal {signum}",))
        # the run's own handlers again afterwards
        assert signal.getsignal(signal.SIGINT) is interrupts.raise_interrupt
        assert signal.getsignal(signal.SIGTERM) is interrupts.raise_interrupt
    finally:
        interrupts.restore(previous)
        signal.signal(signal.SIGINT, saved_int)


def test_a_termination_the_coroutine_took_as_a_cancellation_still_ends_the_run(handlers):
    """A coroutine that keeps what it has on cancellation (the bench does) returns normally; the run
    still ends with the signal, as the lock and a rollout's report need."""
    import asyncio

    previous = interrupts.on_termination()

    async def keeps_what_it_has() -> str:
        try:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(30)
            return "whole"
        except asyncio.CancelledError:
            return "partial"

    try:
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            interrupts.run_async(keeps_what_it_has())
    finally:
        interrupts.restore(previous)
