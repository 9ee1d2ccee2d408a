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
