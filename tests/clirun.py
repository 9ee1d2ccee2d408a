"""`sparkctl ARGS` run in this process, answered like `subprocess.run(..., capture_output=True, text=True)`.

A test of what a command prints and how it exits calls `cli/app.py:main` here instead of starting a
Python (~0.5 CPU-s of imports per run). The run sees what a process of its own would:
- `sys.argv` ["sparkctl", ARGS...] (the lock records its command), the environment and working
  directory it is given, stdin (`input`, else empty), and a stdout and stderr that are not terminals;
- fresh consoles (cli/output.py makes them once per process, from the environment and stdout);
- a SystemExit becomes the exit code, an uncaught exception its traceback on stderr and exit 1.

What it changed of this process is put back when it ends: the environment, the working directory,
sys.argv and the standard streams, the handlers of SIGINT, SIGTERM, SIGHUP and SIGALRM, the root
logger's handlers, the URL prefixes sparkctl sends a key to (httpclient.authorize), the secrets it
masks (transport/redact.py: each run starts knowing none, as a process does); and its
non-daemon threads are waited for (up to 10 s), as a process's exit waits for them.

What only a process shows (the console script, signals, a closed or redirected file descriptor, a
terminal) stays a real process: tests/unit/test_cli_process.py and the files that start one.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)


class _Deadline(BaseException):
    """The run's time is up (a BaseException: the command's own `except Exception` must not swallow it)."""


def sparkctl(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """One `sparkctl ARGS` run: its exit code, stdout and stderr (text, newlines as a pipe's reader sees them).
    `timeout` raises subprocess.TimeoutExpired, as subprocess.run does."""
    from sparkctl.cli.app import main

    args = [os.fspath(a) for a in args]  # a Path argument is its string, as subprocess.run makes it
    out, err = _pipe(), _pipe()
    code = 0
    with _process_state(env, cwd):
        sys.argv = ["sparkctl", *args]
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(input or ""), out, err
        if timeout is not None:
            signal.signal(signal.SIGALRM, _time_is_up)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            main()
        except SystemExit as e:
            code = _exit_code(e.code)
        except _Deadline:
            raise subprocess.TimeoutExpired(["sparkctl", *args], timeout or 0, _text(out), _text(err)) from None
        except Exception:  # noqa: BLE001 - printed as Python prints an uncaught exception
            traceback.print_exc()
            code = 1
        finally:
            if timeout is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
    return subprocess.CompletedProcess(["sparkctl", *args], code, _text(out), _text(err))


def _time_is_up(_sig: int, _frame: object) -> None:
    raise _Deadline


def _pipe() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    return raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # as Python does for sys.exit("message")
    return 1


@contextmanager
def _process_state(env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> Iterator[None]:
    from sparkctl import httpclient
    from sparkctl.cli import output
    from sparkctl.transport import redact

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_signals = {s: signal.getsignal(s) for s in SIGNALS}
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level)
    saved_keys = dict(httpclient._KEYS)
    # the values and names sparkctl masks once it has seen them: a process starts knowing none (a run
    # must not be masked by what an earlier run learnt, which would hide a leak its own process shows)
    saved_secrets = (set(redact._known_secrets), set(redact._secret_names))
    _set_secrets(redact, set(), set())
    threads_before = set(threading.enumerate())
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    output.answer.cache_clear()  # made from this run's environment and stdout
    output.diagnostics.cache_clear()
    try:
        yield
    finally:
        _join_left_threads(threads_before)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        if dict(os.environ) != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)
        for s, handler in saved_signals.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        root.handlers[:], root.level = saved_logging
        with httpclient._KEYS_LOCK:
            httpclient._KEYS.clear()
            httpclient._KEYS.update(saved_keys)
        output.answer.cache_clear()
        output.diagnostics.cache_clear()
        _set_secrets(redact, *saved_secrets)


def _set_secrets(redact, values: set[str], names: set[str]) -> None:
    with redact._lock:
        redact._known_secrets.clear()
        redact._known_secrets.update(values)
        redact._secret_names.clear()
        redact._secret_names.update(names)


def _join_left_threads(before: set[threading.Thread], within: float = 10) -> None:
    """A process's exit waits for its non-daemon threads: so does the run (a bounded wait; one still
    running after it is left, as a test's own thread would be)."""
    import time

    end = time.monotonic() + within
    for t in set(threading.enumerate()) - before:
        if not t.daemon:
            t.join(max(0.0, end - time.monotonic()))
