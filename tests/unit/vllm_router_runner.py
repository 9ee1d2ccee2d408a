"""The real vllm-router (the vllm-router wheel the lab's image carries, installed in this venv) as a
local process, for the tests of sparkctl's side of it and benchmarks/fleet.py: one copy."""

from __future__ import annotations

import os
import sys

from sparkctl_lab.sim import harness


class VllmRouter:
    """`python -m vllm_router.launch_router ARGV` (ARGV: what sparkctl's launch renders, or a plain
    worker list); waits until its /liveness answers."""

    def __init__(self, tmp: str, argv: list[str], base: str, timeout: float = 30):
        self.base = base
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = os.path.join(tmp, f"vllm-router-{base.rsplit(':', 1)[-1]}.log")
        self.proc = harness.Proc("vllm-router", [sys.executable, "-m", "vllm_router.launch_router", *argv], env, log).start()
        assert harness.wait_http(base + "/liveness", timeout=timeout, proc=self.proc), self.proc.log()[-3000:]

    @classmethod
    def on_loopback(cls, tmp: str, workers: list[str], *args: str) -> "VllmRouter":
        port, metrics = harness.free_port(), harness.free_port()
        argv = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics), "--log-level", "warning", *args]  # fmt: skip
        router = cls(tmp, argv, f"http://127.0.0.1:{port}")
        router.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        return router

    @classmethod
    def for_fleet(cls, tmp: str, fleet, startup_timeout: int | None = None) -> "VllmRouter":
        """The router as sparkctl renders it for `fleet` (fleet/router_launch.py), on the door
        member's head address instead of every address; `startup_timeout`: how long a member that
        does not serve is waited for (ADD_WAIT_S unless given)."""
        from sparkctl.fleet.router_launch import router_command

        head = fleet.front_door_address
        argv = [a if a != "0.0.0.0" else head for a in router_command(fleet)[3:]]
        if startup_timeout is not None:
            argv[argv.index("--worker-startup-timeout-secs") + 1] = str(startup_timeout)
        return cls(tmp, argv, fleet.front_door_url)

    def stop(self) -> None:
        self.proc.stop()
