"""Log lines in vLLM 0.33's format, written unbuffered to stdout (what `docker logs` shows).

vllm/logger.py's format is `(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
[%(fileinfo)s:%(lineno)d] %(message)s` (date `%m-%d %H:%M:%S`), e.g. `(APIServer pid=1) INFO
12-01 07:20:50 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000`; NewLineFormatter repeats
the prefix on every line of a multi-line message. The process names are vLLM's: APIServer,
EngineCore (EngineCore_DP<n> with data parallel), Worker_TP<r>. A Ray actor's output reaches the
driver's log behind Ray's own prefix, `(RayWorkerProc pid=80, ip=10.0.0.3) ` (ip for remote nodes).
uvicorn's lines (`INFO:     Application startup complete.`) and tqdm bars use neither prefix.
Every `[file:line]` and message is in docs/conformance.md with its vLLM 0.33 source; lines that
are the simulator's own say `[simulator]`.
"""

from __future__ import annotations

import os
import sys
import threading
import time

_lock = threading.Lock()

# where vLLM lives in its image: the file paths of the tracebacks the simulator prints
SITE = "/usr/local/lib/python3.12/dist-packages/vllm"


def _stamp() -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime())


def plain(text: str, stream=None) -> None:
    """Lines with no vLLM prefix (uvicorn's own logger, tqdm bars, `print`ed tracebacks), written at once
    so that the lines of concurrent threads never interleave."""
    stream = stream or sys.stdout
    with _lock:
        try:
            stream.write(text + "\n")
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


class Logger:
    """One process, e.g. `APIServer pid=1`; `outer` is Ray's actor prefix for a Ray worker's lines."""

    def __init__(self, tag: str, outer: str = ""):
        self.tag, self.outer = tag, outer

    def _emit(self, level: str, where: str, msg: str) -> None:
        outer = f"({self.outer}) " if self.outer else ""
        head = f"{outer}({self.tag}) {level} {_stamp()} [{where}] "
        plain("\n".join(head + part for part in msg.split("\n")))

    def info(self, where: str, msg: str) -> None:
        self._emit("INFO", where, msg)

    def warning(self, where: str, msg: str) -> None:
        self._emit("WARNING", where, msg)

    def error(self, where: str, msg: str) -> None:
        self._emit("ERROR", where, msg)

    def raw(self, text: str) -> None:
        """A line the process prints itself (tqdm): only Ray's actor prefix, if any."""
        outer = f"({self.outer}) " if self.outer else ""
        plain("\n".join(outer + part for part in text.split("\n")))


def api_logger() -> Logger:
    return Logger(f"APIServer pid={os.getpid()}")


def engine_logger() -> Logger:
    # vLLM runs the engine core in its own process (EngineCore without data parallel); one process
    # here, so a neighbouring pid.
    return Logger(f"EngineCore pid={os.getpid() + 1}")
