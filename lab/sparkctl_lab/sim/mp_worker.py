"""One local rank of a `--headless` node under vLLM's mp executor: the `VllmWorker-<rank>` process
that `run_headless` (server.py) starts and watches, as v1/executor/multiproc_executor.py's
WorkerProc. It joins the head's rendezvous (`--master-addr:--master-port`), logs its
torch.distributed line and then serves the rank (compile-cache calls on this node) until SIGTERM.

When the head goes away the rank does not exit: vLLM 0.33's headless node only watches its own
worker processes (vllm-project/vllm#32136: "When DP head node crash but headless node can't
automatic stop"), so the node must be stopped from outside (`sparkctl down`/`up` stop both).

Run as `python3 -m sparkctl_lab.sim.mp_worker ADDRESS RANK WORLD`.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from . import cluster, vlog
from . import knobs as knobs_mod
from .ray_cli import node_handlers, stop_on_signals
from .startup import SIM


def main(argv: list[str]) -> int:
    address, rank, world = argv[0], int(argv[1]), int(argv[2])
    k = knobs_mod.load()
    log = vlog.Logger(f"Worker_TP{rank} pid={os.getpid()}")
    woke = threading.Event()  # a signal, or the agent lost the head (the agent's `lost`)
    stop = stop_on_signals(woke)
    deadline = time.monotonic() + max(k.ray_join_timeout, 60)

    def print_line(args: dict) -> dict:  # the head's start-up phases log this rank's lines here
        if "raw" in args:
            vlog.plain(args["raw"])
        else:
            log._emit(args["level"], args["where"], args["msg"])
        return {}

    handlers = {**node_handlers(), "log": print_line, "hello": lambda _a: {"pid": os.getpid(), "hostname": socket.gethostname()}}
    agent = None
    while agent is None:
        if stop.is_set():
            return 0
        try:
            agent = cluster.NodeAgent(
                address,
                os.environ.get("VLLM_HOST_IP"),
                {"GPU": float(k.gpu_count)},
                False,
                handlers,
                k.ray_health_timeout,
                socket.gethostname(),
                os.getpid(),
                lost=woke,
            )
        except (OSError, ConnectionError):
            woke.clear()  # a failed join's agent set it; a signal since has set `stop` too
            if stop.is_set():
                return 0
            if time.monotonic() > deadline:
                log.error(
                    SIM,
                    f"[simulator] WorkerProc failed to start: no rendezvous at tcp://{address} "
                    f"within {max(k.ray_join_timeout, 60):.0f} s",
                )
                return 1
            time.sleep(0.5)
    # distributed/parallel_state.py init_distributed_environment, with --nnodes > 1
    log.info(
        "parallel_state.py:1929",
        f"world_size={world} rank={rank} local_rank=0 distributed_init_method=tcp://{address} backend=nccl",
    )
    woke.wait()  # blocks until a signal or the head is lost
    if not stop.is_set():
        log.warning(
            SIM,
            f"[simulator] lost the head at tcp://{address}; a headless rank does not exit by itself (vllm#32136): stop this node",
        )
        stop.wait()
    agent.close()
    return 0


if __name__ == "__main__":
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)
    sys.exit(main(sys.argv[1:]))
