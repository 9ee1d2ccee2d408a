"""Log lines in vLLM's format, written unbuffered to stdout (what `docker logs` shows).

vLLM prints `(APIServer pid=1) INFO 06-21 07:20:50 [api_server.py:596] Starting vLLM server on ...`;
the process tag names the process that logged (APIServer, EngineCore_DP0, a Ray worker).
"""

from __future__ import annotations

import os
import sys
import threading
import time

_lock = threading.Lock()


def _stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime())


def write_line(line: str, stream=None) -> None:
    stream = stream or sys.stdout
    with _lock:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


class Logger:
    """One process tag, e.g. `APIServer pid=1` or `RayWorkerWrapper pid=80, ip=10.0.0.3`."""

    def __init__(self, tag: str):
        self.tag = tag

    def _emit(self, level: str, where: str, msg: str) -> None:
        prefix = f"({self.tag}) " if self.tag else ""
        for i, part in enumerate(msg.split("\n")):
            if i == 0:
                write_line(f"{prefix}{level} {_stamp()} [{where}] {part}")
            else:
                write_line(f"{prefix}{level} {_stamp()} [{where}] {part}")

    def info(self, where: str, msg: str) -> None:
        self._emit("INFO", where, msg)

    def warning(self, where: str, msg: str) -> None:
        self._emit("WARNING", where, msg)

    def error(self, where: str, msg: str) -> None:
        self._emit("ERROR", where, msg)

    def raw(self, text: str) -> None:
        """A line printed without level/time (uvicorn, tqdm, tracebacks)."""
        prefix = f"({self.tag}) " if self.tag else ""
        for part in text.split("\n"):
            write_line(f"{prefix}{part}")


def api_logger() -> Logger:
    return Logger(f"APIServer pid={os.getpid()}")


def engine_logger() -> Logger:
    # vLLM runs the engine core in its own process; one process here, so a neighbouring pid.
    return Logger(f"EngineCore_DP0 pid={os.getpid() + 1}")
