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

from . import RAY_VERSION, cluster, knobs
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
    """Methods the driver calls on a node: a TP rank's compile cache on *this* node."""
    env = dict(os.environ)

    def init_rank(spec: dict) -> dict:
        return rank_call("init_rank", spec, env, os.getpid())

    def save_rank(spec: dict) -> dict:
        return rank_call("save_rank", spec, env, os.getpid())

    def hello(_args: dict) -> dict:
        return {"pid": os.getpid(), "hostname": socket.gethostname()}

    return {"init_rank": init_rank, "save_rank": save_rank, "hello": hello}


def _wait_for_signal(stop: threading.Event) -> None:
    def handler(signum, _frame):
        stop.set()

    # PID 1 in a container ignores signals it has no handler for: install them explicitly.
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _head_banner(ip: str, address: str, foreground: bool) -> None:
    """What `ray start --head` prints once the head is up (the daemonizing parent prints the short form)."""
    _say("Usage stats collection is disabled.")
    _say("")
    _say(f"Local node IP: {ip}")
    _say("")
    _say("--------------------")
    _say("Ray runtime started.")
    _say("--------------------")
    _say("")
    _say("Next steps")
    _say("  To add another node to this Ray cluster, run")
    _say(f"    ray start --address='{address}'")
    _say("")
    if foreground:
        _say("  To connect to this Ray cluster:")
        _say("    import ray")
        _say(f"    ray.init(_node_ip_address='{ip}')")
        _say("")
    _say("  To terminate the Ray runtime, run")
    _say("    ray stop")
    if foreground:
        _say("")
        _say("  To view the status of the cluster, use")
        _say("    ray status")


def _block_banner() -> None:
    _say("--block")
    _say("  This command will now block forever until terminated by a signal.")
    _say("  Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. "
         "Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported.")


def run_head(args, foreground_banner: bool = True) -> int:
    k = knobs.load()
    ip = args.node_ip_address or "127.0.0.1"
    bind = "0.0.0.0" if os.environ.get("SIM_RAY_BIND_ALL", "0") not in ("", "0") else ip
    tdir = temp_dir(args.temp_dir)
    try:
        gcs = cluster.GcsServer(bind, args.port, k.ray_health_timeout, log=lambda s: None)
    except OSError as e:
        _say(f"ConnectionError: Failed to start the GCS server on {bind}:{args.port}: {e}")
        return 1
    gcs.serve_in_background()
    address = f"{ip}:{gcs.port}"
    agent = cluster.NodeAgent(address, ip, _node_resources(args), True, node_handlers(), k.ray_health_timeout,
                              socket.gethostname(), os.getpid())
    os.makedirs(tdir, exist_ok=True)
    with open(current_cluster_file(tdir), "w", encoding="utf-8") as f:
        f.write(address + "\n")
    _write_pid(tdir, "head")
    stop = threading.Event()
    _wait_for_signal(stop)
    if foreground_banner:
        _head_banner(ip, address, foreground=True)
        if args.block:
            _say("")
            _block_banner()
    while not stop.wait(0.5):
        pass
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
    stop = threading.Event()
    _wait_for_signal(stop)  # before joining: `docker stop` of a worker still looking for its head ends it at once
    while agent is None:
        if stop.is_set():
            return 0
        try:
            agent = cluster.NodeAgent(address, args.node_ip_address, _node_resources(args), False, node_handlers(),
                                      k.ray_health_timeout, socket.gethostname(), os.getpid())
        except (OSError, ConnectionError) as e:
            last_error = str(e)
            if time.monotonic() > deadline:
                _say(f"ConnectionError: Failed to connect to GCS at address {address} within {k.ray_join_timeout:.0f} seconds "
                     f"({last_error}). Check that the head node is running `ray start --head` and is reachable.")
                return 1
            time.sleep(0.5)
    tdir = temp_dir(args.temp_dir)
    os.makedirs(tdir, exist_ok=True)
    _write_pid(tdir, "worker")
    _say(f"Local node IP: {agent.ip}")
    _say("")
    _say("--------------------")
    _say("Ray runtime started.")
    _say("--------------------")
    _say("")
    _say("To terminate the Ray runtime, run")
    _say("  ray stop")
    if args.block:
        _say("")
        _block_banner()
    while not stop.is_set() and not agent.lost.is_set():
        stop.wait(0.2)
    if stop.is_set():
        agent.close()
        _cleanup(tdir, "worker", None)
        return 0
    _say("Some Ray subprocesses exited unexpectedly:")
    _say("  raylet [exit code=1]")
    _say("")
    _say("Remaining processes will be killed.")
    _cleanup(tdir, "worker", None)
    return 1


def _write_pid(tdir: str, role: str) -> None:
    with open(os.path.join(tdir, f"sim_{role}_{os.getpid()}.pid"), "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))


def _cleanup(tdir: str, role: str, address: str | None) -> None:
    try:
        os.remove(os.path.join(tdir, f"sim_{role}_{os.getpid()}.pid"))
    except OSError:
        pass
    if address:
        path = current_cluster_file(tdir)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read().strip() == address:
                    os.remove(path)
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
            return run_head(args, foreground_banner=True)
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
        _say("--------------------")
        _say("Ray runtime started.")
        _say("--------------------")
        _say("")
        _say("To terminate the Ray runtime, run")
        _say("  ray stop")
    return rc


def _fmt_bytes(n: float) -> str:
    return f"{n / 1024**3:.2f}GiB"


def cmd_status(args) -> int:
    tdir = temp_dir(getattr(args, "temp_dir", None))
    address = find_address(args.address, tdir)
    if not address:
        _say("ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting "
             "`--address` flag or `RAY_ADDRESS` environment variable.")
        return 1
    try:
        st = cluster.query_status(address)
    except (OSError, ConnectionError) as e:
        _say(f"ConnectionError: Could not connect to Ray GCS at {address}: {e}")
        return 1
    alive = [n for n in st["nodes"] if n["alive"]]
    dead = [n for n in st["nodes"] if not n["alive"]]
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    _say(f"======== Autoscaler status: {now} ========")
    _say("Node status")
    _say("-" * 63)
    _say("Active:")
    for n in alive:
        _say(f" 1 node_{n['node_id']}")
    _say("Pending:")
    _say(" (no pending nodes)")
    _say("Recent failures:")
    if dead:
        for n in dead:
            _say(f" node_{n['node_id']} ({n['ip']})")
    else:
        _say(" (no failures)")
    _say("")
    _say("Resources")
    _say("-" * 63)
    _say("Total Usage:")
    total: dict[str, float] = {}
    used: dict[str, float] = {}
    for n in alive:
        for key, v in n["resources"].items():
            total[key] = total.get(key, 0.0) + v
        for key, v in n["used"].items():
            used[key] = used.get(key, 0.0) + v
    for key in ("CPU", "GPU"):
        _say(f" {used.get(key, 0.0):.1f}/{total.get(key, 0.0):.1f} {key}")
    for key in ("memory", "object_store_memory"):
        _say(f" 0B/{_fmt_bytes(total.get(key, 0.0))} {key}")
    _say("")
    _say("Total Constraints:")
    _say(" (no request_resources() constraints)")
    _say("Total Demands:")
    _say(" (no resource demands)")
    return 0


def cmd_stop(args) -> int:
    tdir = temp_dir(args.temp_dir)
    stopped = 0
    if os.path.isdir(tdir):
        for name in os.listdir(tdir):
            if name.startswith("sim_") and name.endswith(".pid"):
                try:
                    with open(os.path.join(tdir, name), encoding="utf-8") as f:
                        pid = int(f.read().strip())
                    os.kill(pid, signal.SIGKILL if args.force else signal.SIGTERM)
                    stopped += 1
                except (OSError, ValueError):
                    pass
                try:
                    os.remove(os.path.join(tdir, name))
                except OSError:
                    pass
    if stopped:
        _say(f"Stopped all {stopped} Ray processes.")
    else:
        _say("Did not find any active Ray processes.")
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
    s.add_argument("--object-store-memory", type=int, default=None)
    s.add_argument("--memory", type=int, default=None)
    s.add_argument("--dashboard-host", default=None)
    s.add_argument("--dashboard-port", type=int, default=None)
    s.add_argument("--include-dashboard", default=None)
    s.add_argument("--disable-usage-stats", action="store_true")
    s.add_argument("--node-manager-port", type=int, default=None)
    s.add_argument("--object-manager-port", type=int, default=None)
    s.add_argument("--min-worker-port", type=int, default=None)
    s.add_argument("--max-worker-port", type=int, default=None)
    s.add_argument("--ray-client-server-port", type=int, default=None)
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
