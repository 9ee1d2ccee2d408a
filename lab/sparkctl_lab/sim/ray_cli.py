"""`ray start | status | stop` as vLLM's multi-node recipe runs them (run_cluster.sh).

    ray start --head --node-ip-address=IP --port=6379 [--block]
    ray start --address=HEAD_IP:6379 [--node-ip-address=IP] [--block]
    ray status [--address=HEAD_IP:6379]
    ray stop

The head runs the GCS (cluster.GcsServer) bound to its node IP; without --block it daemonizes
and returns 0. A worker joins over that address and, with --block, exits 1 when the head goes
away. The cluster's address is written to <temp dir>/ray_current_cluster (temp dir: --temp-dir,
else $RAY_TMPDIR/ray, else /tmp/ray) so `ray status` and `vllm serve` find it, as Ray's do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from . import RAY_VERSION, cluster, knobs, weights
from .compile_cache import rank_call


def temp_dir(flag: str | None = None) -> str:
    if flag:
        return flag
    return os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", "ray")


def current_cluster_file(tdir: str) -> str:
    return os.path.join(tdir, "ray_current_cluster")


def find_address(flag: str | None, tdir: str) -> str | None:
    if flag and flag != "auto":
        return flag
    if os.environ.get("RAY_ADDRESS") and os.environ["RAY_ADDRESS"] != "auto":
        return os.environ["RAY_ADDRESS"]
    try:
        with open(current_cluster_file(tdir), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _node_resources(args) -> dict[str, float]:
    k = knobs.load()
    gpus = args.num_gpus if args.num_gpus is not None else k.gpu_count
    cpus = args.num_cpus if args.num_cpus is not None else (os.cpu_count() or 1)
    mem = 0
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    res = {"CPU": float(cpus), "GPU": float(gpus), "memory": float(mem * 0.7), "object_store_memory": float(mem * 0.3)}
    if args.resources:
        res.update({k2: float(v) for k2, v in json.loads(args.resources).items()})
    return res


def node_handlers() -> dict:
    """Methods the driver calls on a node: a TP rank's compile cache and model directory on *this* node."""
    env = dict(os.environ)
    return {
        "init_rank": lambda spec: rank_call("init_rank", spec, env, os.getpid()),
        "save_rank": lambda spec: rank_call("save_rank", spec, env, os.getpid()),
        # a rank's model directory on *this* node (SIM_CHECK_MODEL_PATH): what vLLM's loader would refuse
        "check_weights": lambda spec: weights.report(spec["models"]),
        "hello": lambda _args: {"pid": os.getpid(), "hostname": socket.gethostname()},
    }


def stop_on_signals(wake: threading.Event | None = None) -> threading.Event:
    """An event SIGTERM/SIGINT set (and `wake` with it: one event a main thread blocks on for a
    signal or something else). PID 1 in a container ignores signals it has no handler for."""
    stop = threading.Event()

    def on_signal(*_) -> None:
        stop.set()
        if wake is not None:
            wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop


STARTED = "--------------------\nRay runtime started.\n--------------------\n"
BLOCK = (
    "--block\n  This command will now block forever until terminated by a signal.\n"
    "  Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. "
    "Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported."
)


def _head_banner(ip: str, address: str, foreground: bool) -> None:
    """What `ray start --head` prints once the head is up (the daemonizing parent prints the short form)."""
    connect = f"  To connect to this Ray cluster:\n    import ray\n    ray.init(_node_ip_address='{ip}')\n\n"
    status = "\n\n  To view the status of the cluster, use\n    ray status"
    _say(
        f"Usage stats collection is disabled.\n\nLocal node IP: {ip}\n\n{STARTED}\nNext steps\n"
        f"  To add another node to this Ray cluster, run\n    ray start --address='{address}'\n\n"
        f"{connect if foreground else ''}  To terminate the Ray runtime, run\n    ray stop{status if foreground else ''}"
    )


def _worker_banner() -> None:
    _say(f"{STARTED}\nTo terminate the Ray runtime, run\n  ray stop")


def run_head(args) -> int:
    k = knobs.load()
    ip = args.node_ip_address or "127.0.0.1"
    bind = "0.0.0.0" if os.environ.get("SIM_RAY_BIND_ALL", "0") not in ("", "0") else ip
    tdir = temp_dir(args.temp_dir)
    try:
        gcs = cluster.GcsServer(bind, args.port, k.ray_health_timeout)
    except OSError as e:
        _say(f"ConnectionError: Failed to start the GCS server on {bind}:{args.port}: {e}")
        return 1
    gcs.serve_in_background()
    address = f"{ip}:{gcs.port}"
    agent = cluster.NodeAgent(
        address, ip, _node_resources(args), True, node_handlers(), k.ray_health_timeout, socket.gethostname(), os.getpid()
    )
    os.makedirs(tdir, exist_ok=True)
    with open(current_cluster_file(tdir), "w", encoding="utf-8") as f:
        f.write(address + "\n")
    _pid_file(tdir, "head").write_text(str(os.getpid()))
    stop = stop_on_signals()
    _head_banner(ip, address, foreground=True)
    if args.block:
        _say("\n" + BLOCK)
    stop.wait()  # blocks until a signal (the handler runs in this thread; the wait resumes after it)
    agent.close()
    gcs.shutdown()
    _cleanup(tdir, "head", address)
    return 0


def run_worker(args) -> int:
    k = knobs.load()
    address = args.address
    deadline = time.monotonic() + k.ray_join_timeout
    agent = None
    last_error = ""
    woke = threading.Event()  # a signal, or the agent lost its head (the agent's `lost`)
    stop = stop_on_signals(woke)  # before joining: `docker stop` of a worker still looking for its head ends it at once
    while agent is None:
        if stop.is_set():
            return 0
        try:
            agent = cluster.NodeAgent(
                address,
                args.node_ip_address,
                _node_resources(args),
                False,
                node_handlers(),
                k.ray_health_timeout,
                socket.gethostname(),
                os.getpid(),
                lost=woke,
            )
        except (OSError, ConnectionError) as e:
            woke.clear()  # a failed join's agent set it; a signal since has set `stop` too
            if stop.is_set():
                return 0
            last_error = str(e)
            if time.monotonic() > deadline:
                _say(
                    f"ConnectionError: Failed to connect to GCS at address {address} within {k.ray_join_timeout:.0f} seconds "
                    f"({last_error}). Check that the head node is running `ray start --head` and is reachable."
                )
                return 1
            stop.wait(0.5)
    tdir = temp_dir(args.temp_dir)
    os.makedirs(tdir, exist_ok=True)
    _pid_file(tdir, "worker").write_text(str(os.getpid()))
    _say(f"Local node IP: {agent.ip}\n")
    _worker_banner()
    if args.block:
        _say("\n" + BLOCK)
    woke.wait()  # blocks until a signal or the head is lost
    if stop.is_set():
        agent.close()
        _cleanup(tdir, "worker", None)
        return 0
    _say("Some Ray subprocesses exited unexpectedly:\n  raylet [exit code=1]\n\nRemaining processes will be killed.")
    _cleanup(tdir, "worker", None)
    return 1


def _pid_file(tdir: str, role: str) -> Path:
    return Path(tdir, f"sim_{role}_{os.getpid()}.pid")


def _cleanup(tdir: str, role: str, address: str | None) -> None:
    _pid_file(tdir, role).unlink(missing_ok=True)
    cluster_file = Path(current_cluster_file(tdir))
    try:
        if address and cluster_file.read_text().strip() == address:
            cluster_file.unlink()
    except OSError:
        pass


def _daemonize(argv: list[str], tdir: str, role: str, ready) -> int:
    """Start this command again with --block in its own session; wait until it is up."""
    os.makedirs(os.path.join(tdir, "session_latest", "logs"), exist_ok=True)
    log_path = os.path.join(tdir, "session_latest", "logs", f"{role}.out")
    cmd = [sys.executable, "-m", "sparkctl_lab.sim.ray_cli", *argv, "--block", "--_daemon"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-2000:]
            sys.stdout.write(tail)
            return proc.returncode or 1
        if ready():
            return 0
        time.sleep(0.1)
    return 1


def cmd_start(args, argv: list[str]) -> int:
    tdir = temp_dir(args.temp_dir)
    if args.head == bool(args.address):
        _say("ValueError: `ray start` needs either --head or --address=<head address>.")
        return 1
    if args.head:
        if args.block or args._daemon:
            return run_head(args)
        ip = args.node_ip_address or "127.0.0.1"
        address = f"{ip}:{args.port}"

        def head_ready() -> bool:
            try:
                cluster.query_status(address, timeout=1.0)
                return True
            except (OSError, ConnectionError):
                return False

        rc = _daemonize(argv, tdir, "head", head_ready)
        if rc == 0:
            _head_banner(ip, address, foreground=False)
        return rc
    if args.block or args._daemon:
        return run_worker(args)
    before = set(os.listdir(tdir)) if os.path.isdir(tdir) else set()

    def worker_ready() -> bool:
        now = set(os.listdir(tdir)) if os.path.isdir(tdir) else set()
        return any(n.startswith("sim_worker_") for n in now - before)

    rc = _daemonize(argv, tdir, "worker", worker_ready)
    if rc == 0:
        _worker_banner()
    return rc


def cmd_status(args) -> int:
    tdir = temp_dir(getattr(args, "temp_dir", None))
    address = find_address(args.address, tdir)
    if not address:
        _say(
            "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting "
            "`--address` flag or `RAY_ADDRESS` environment variable."
        )
        return 1
    try:
        st = cluster.query_status(address)
    except (OSError, ConnectionError) as e:
        _say(f"ConnectionError: Could not connect to Ray GCS at {address}: {e}")
        return 1
    alive = [n for n in st["nodes"] if n["alive"]]
    failures = [f" node_{n['node_id']} ({n['ip']})" for n in st["nodes"] if not n["alive"]] or [" (no failures)"]
    total, used = Counter(), Counter()
    for n in alive:
        total.update(n["resources"])
        used.update(n["used"])
    rule = "-" * 63
    lines = [
        f"======== Autoscaler status: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')} ========",
        "Node status",
        rule,
        "Active:",
        *(f" 1 node_{n['node_id']}" for n in alive),
        "Pending:",
        " (no pending nodes)",
        "Recent failures:",
        *failures,
        "",
        "Resources",
        rule,
        "Total Usage:",
        *(f" {used[key]:.1f}/{total[key]:.1f} {key}" for key in ("CPU", "GPU")),
        *(f" 0B/{total[key] / 1024**3:.2f}GiB {key}" for key in ("memory", "object_store_memory")),
        "",
        "Total Constraints:",
        " (no request_resources() constraints)",
        "Total Demands:",
        " (no resource demands)",
    ]
    _say("\n".join(lines))
    return 0


def cmd_stop(args) -> int:
    stopped = 0
    for pid_file in Path(temp_dir(args.temp_dir)).glob("sim_*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL if args.force else signal.SIGTERM)
            stopped += 1
        except (OSError, ValueError):
            pass
        pid_file.unlink(missing_ok=True)
    _say(f"Stopped all {stopped} Ray processes." if stopped else "Did not find any active Ray processes.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ray")
    p.add_argument("--version", action="version", version=f"ray, version {RAY_VERSION}")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("start")
    s.add_argument("--head", action="store_true")
    s.add_argument("--address", default=None)
    s.add_argument("--node-ip-address", default=None)
    s.add_argument("--port", type=int, default=6379)
    s.add_argument("--block", action="store_true")
    s.add_argument("--num-gpus", type=int, default=None)
    s.add_argument("--num-cpus", type=int, default=None)
    s.add_argument("--resources", default=None)
    s.add_argument("--temp-dir", default=None)
    s.add_argument("--disable-usage-stats", action="store_true")
    # accepted for the recipe's command lines, no effect here
    for name in (
        "--object-store-memory",
        "--memory",
        "--dashboard-port",
        "--node-manager-port",
        "--object-manager-port",
        "--min-worker-port",
        "--max-worker-port",
        "--ray-client-server-port",
    ):
        s.add_argument(name, type=int, default=None)
    s.add_argument("--dashboard-host", default=None)
    s.add_argument("--include-dashboard", default=None)
    s.add_argument("--_daemon", action="store_true", help=argparse.SUPPRESS)
    st = sub.add_parser("status")
    st.add_argument("--address", default=None)
    st.add_argument("--temp-dir", default=None, help=argparse.SUPPRESS)
    sp = sub.add_parser("stop")
    sp.add_argument("--force", "-f", action="store_true")
    sp.add_argument("--temp-dir", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "start":
        start_argv = [a for a in argv[1:] if a not in ("--block", "--_daemon")]
        return cmd_start(args, ["start", *start_argv])
    if args.command == "status":
        return cmd_status(args)
    if args.command == "stop":
        return cmd_stop(args)
    parser.print_help()
    return 1


if __name__ == "__main__":
    sys.exit(main())
