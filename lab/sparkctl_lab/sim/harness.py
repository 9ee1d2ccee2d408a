"""Run the simulator's processes on this machine (loopback) for tests and experiments.

Stdlib only. Each process is a real subprocess with its own environment; logs go to a file the
caller can read. Nothing here is used inside the image.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from . import knobs

# Ports handed out by free_port: below the kernel's ephemeral range (32768-60999 by default), so no
# port-0 bind or outgoing connection on this machine takes one, and never the same one twice to
# any process on the machine until the range wraps: a counter in PORTS_FILE, advanced under flock.
# "Bind port 0, close, return it" raced: the kernel may hand the same port to the next process that
# asks (the four pytest processes side by side start servers on ports so found; a fresh-clone CI
# died on EADDRINUSE).
PORTS_FILE = os.path.join(os.environ.get("TMPDIR") or "/tmp", "sparkctl-test-ports")
PORT_RANGE = (20000, 32000)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on and no other caller of free_port (in this
    process or any other on the machine) gets: a server may be started on it later."""
    import fcntl

    low, high = PORT_RANGE
    fd = os.open(PORTS_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            os.fchmod(fd, 0o666)  # a developer's unprivileged run and root's CI share the counter
        except OSError:
            pass  # another user's file: it is already writable by all
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 32).decode(errors="replace").strip()
        port = int(raw) if raw.isdigit() and low <= int(raw) < high else low + os.getpid() % (high - low)
        for _ in range(high - low):
            port = port + 1 if port + 1 < high else low
            if _bindable(host, port):
                break
        else:
            raise OSError(f"no free port in {low}-{high} on {host}")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(port).encode())
        return port
    finally:
        os.close(fd)  # closing drops the flock


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_state(host: str, port: int) -> str:
    """'refused', 'open' or 'timeout' for a TCP connect."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "timeout"


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: str
    popen: subprocess.Popen | None = None
    _log: object = field(default=None, repr=False)

    def start(self) -> "Proc":
        self._log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_log(self, text: str, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.log():
                return True
            if self.popen.poll() is not None:
                return text in self.log()
            time.sleep(0.05)
        return False

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float = 30.0) -> int:
        return self.popen.wait(timeout)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(5)
        if self._log:
            self._log.close()
        return self.popen.returncode


def module_argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"sparkctl_lab.sim.{module}", *args]


LAB_MODEL = "/models/DeepSeek-V4.1-Flash-1017"
DRAFT_SPEC = json.dumps({"method": "draft_model", "model": "/models/drafter", "num_speculative_tokens": 5})


def target_argv(port: int, *extra: str, tp: int = 2) -> list[str]:
    """`vllm serve` of the lab's target model as the lab inventory launches it (TP over Ray, the
    drafter's speculative config), on loopback at PORT; EXTRA flags follow."""
    # fmt: off
    return module_argv(
        "vllm_cli", "serve", LAB_MODEL, "--tensor-parallel-size", str(tp), "--distributed-executor-backend", "ray",
        "--kv-cache-dtype", "fp8_ds_mla", "--block-size", "256", "--gpu-memory-utilization", "0.85",
        "--max-model-len", "327680", "--max-num-seqs", "4", "--max-num-batched-tokens", "8192",
        "--speculative-config", DRAFT_SPEC, "--moe-backend", "flashinfer_b12x",
        "--host", "127.0.0.1", "--port", str(port), *extra,
    )
    # fmt: on


def sim_env(base_dir: str, **extra: str) -> dict[str, str]:
    """A clean environment: own HOME, cache root and Ray temp dir under base_dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SIM_", "RAY_", "SPLICE_"))}
    env.update(
        {
            "HOME": os.path.join(base_dir, "home"),
            "RAY_TMPDIR": os.path.join(base_dir, "raytmp"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds sparkctl_lab
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    os.makedirs(env["HOME"], exist_ok=True)
    os.makedirs(env["RAY_TMPDIR"], exist_ok=True)
    return env


def set_faults(base_url: str | None, faults_file: str, text: str, timeout: float = 30.0) -> None:
    """Write the simulator's run-time fault file (`text` empty: remove it) and wait until its
    /sim/state reports those faults applied (it reads the file every 0.25 s; a loaded machine may
    take longer, so no fixed sleep). `base_url` None: a simulator that takes no new connections (its
    drain has begun) is not asked; the caller waits for what the faults do instead."""
    if text:
        # whole or not at all: the simulator reads the file every 0.25 s, and an empty read (between a
        # truncation and its write) switched the faults off for a step (ci83: a hung engine ran its
        # two requests to the end in that window, so a crash found none)
        tmp = f"{faults_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, faults_file)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(faults_file)
    if base_url is None:
        return
    want = knobs.read_fault_file(faults_file)
    end = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(base_url + "/sim/state", timeout=5.0) as r:
            if json.load(r).get("faults_applied") == want:
                return
        if time.monotonic() >= end:
            raise TimeoutError(f"{base_url}: faults {want} not applied within {timeout:.0f} s")
        time.sleep(0.05)


def wait_http(url: str, want: int = 200, timeout: float = 30.0, proc: Proc | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            status = None
        if status == want:
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False
