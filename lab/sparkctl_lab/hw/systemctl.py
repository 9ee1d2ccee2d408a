"""The lab's stand-in for `systemctl` on a lab host, which has no systemd (its PID 1 is
sparkctl_lab.hostinit). Just what sparkctl's keeper step asks, with systemd's meaning:

    daemon-reload                     nothing to do: a unit file is read when its unit starts
    enable [--now] UNIT               the [Install] symlink in /etc/systemd/system/multi-user.target.wants
                                      (--now: and start it)
    disable [--now] UNIT              removes it (--now: and stops the unit, waiting until it is gone)
    start | restart | stop UNIT       start (a no-op when running), stop then start, stop
    is-enabled | is-active UNIT       prints the state; exit 0 when enabled / active
    --boot                            what the host's PID 1 runs at its start: every enabled unit

Each running unit has a supervisor process of its own (`--supervise UNIT`, detached, a child of
the host's PID 1): it runs the unit's ExecStart with its Environment= lines in a session of its
own, starts it again RestartSec after it exits (Restart=always), restarts it on SIGHUP, and on
SIGTERM stops it (SIGTERM to its process group, SIGKILL after TimeoutStopSec) and exits.
What it does not do (docs/keeper.md "In the lab"): dependencies and ordering (After=, Wants=:
--boot runs after sshd and dockerd are started, not once they answer), other Restart= values,
StartLimit*, cgroups, the journal (a unit's output goes to /run/sparkctl-lab/units/UNIT.log,
volatile like journald's default). Stdlib only (run with python -S).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

UNIT_DIR = "/etc/systemd/system"
WANTS = f"{UNIT_DIR}/multi-user.target.wants"
RUN_DIR = "/run/sparkctl-lab/units"  # UNIT.pid (the unit's process), UNIT.sup (its supervisor), UNIT.log
WAIT_S = 40.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _pid(path: str) -> int | None:
    try:
        pid = int(open(path).read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:  # a zombie is not running (PID 1 reaps it soon)
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return None
    except (OSError, IndexError):
        return None
    return pid


def unit_pid(unit: str) -> int | None:
    return _pid(f"{RUN_DIR}/{unit}.pid")


def supervisor_pid(unit: str) -> int | None:
    return _pid(f"{RUN_DIR}/{unit}.sup")


def read_unit(path: str) -> dict | None:
    """The [Service] keys honoured here: ExecStart, Environment, RestartSec, TimeoutStopSec."""
    try:
        text = open(path).read()
    except OSError:
        return None
    section, unit = "", {"env": {}, "restart_s": 0.1, "stop_s": 90.0, "exec": None}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            if key == "ExecStart":
                unit["exec"] = shlex.split(value)
            elif key == "Environment":
                k, _, v = value.partition("=")
                unit["env"][k] = v
            elif key == "RestartSec":
                unit["restart_s"] = float(value.rstrip("s") or 0.1)
            elif key == "TimeoutStopSec":
                unit["stop_s"] = float(value.rstrip("s") or 90)
    return unit if unit["exec"] else None


# --- the supervisor (one process per running unit) ------------------------------------------------


def supervise(unit: str) -> int:
    spec = read_unit(f"{UNIT_DIR}/{unit}")
    if spec is None:
        return 1
    state = {"stop": False, "restart": False}
    signal.signal(signal.SIGTERM, lambda *_: state.update(stop=True))
    signal.signal(signal.SIGHUP, lambda *_: state.update(restart=True))
    with open(f"{RUN_DIR}/{unit}.sup", "w") as f:
        f.write(f"{os.getpid()}\n")
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", **spec["env"]}
    while not state["stop"]:
        with open(f"{RUN_DIR}/{unit}.log", "ab") as log:
            child = subprocess.Popen(spec["exec"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     cwd="/", close_fds=True, start_new_session=True)  # fmt: skip
        with open(f"{RUN_DIR}/{unit}.pid", "w") as f:
            f.write(f"{child.pid}\n")
        while child.poll() is None and not state["stop"] and not state["restart"]:
            time.sleep(0.2)
        if child.poll() is None:  # asked to stop or restart
            _stop(child, spec["stop_s"])
        os.unlink(f"{RUN_DIR}/{unit}.pid")
        if state["restart"]:
            state["restart"] = False
            continue
        deadline = time.monotonic() + spec["restart_s"]  # Restart=always, after RestartSec
        while time.monotonic() < deadline and not state["stop"] and not state["restart"]:
            time.sleep(0.1)
    os.unlink(f"{RUN_DIR}/{unit}.sup")
    return 0


def _stop(child: subprocess.Popen, stop_s: float) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(stop_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    except ProcessLookupError:
        child.wait()


def _start_supervisor(unit: str) -> None:
    """A detached supervisor (double fork: its parent is the host's PID 1, which reaps it)."""
    os.makedirs(RUN_DIR, exist_ok=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            fd = os.open(os.devnull, os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(fd, i)
            os._exit(supervise(unit))
        os._exit(0)
    os.wait()


# --- the commands ---------------------------------------------------------------------------------


def _wait(done, what: str) -> int:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            print(f"systemctl (lab stand-in): {what} did not happen within {WAIT_S:g} s", file=sys.stderr)
            return 1
        time.sleep(0.1)
    return 0


def start(unit: str) -> int:
    if supervisor_pid(unit) is None:
        _start_supervisor(unit)
    return _wait(lambda: unit_pid(unit) is not None, f"the start of {unit}")


def stop(unit: str) -> int:
    sup = supervisor_pid(unit)
    if sup is not None:
        os.kill(sup, signal.SIGTERM)
    return _wait(lambda: supervisor_pid(unit) is None and unit_pid(unit) is None, f"the stop of {unit}")


def restart(unit: str) -> int:
    before, sup = unit_pid(unit), supervisor_pid(unit)
    if sup is None:
        return start(unit)
    os.kill(sup, signal.SIGHUP)
    return _wait(lambda: unit_pid(unit) not in (None, before), f"the restart of {unit}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--supervise"]:
        return supervise(argv[1])
    if argv[:1] == ["--boot"]:
        enabled = sorted(os.listdir(WANTS)) if os.path.isdir(WANTS) else []
        return max([start(u) for u in enabled], default=0)
    args = [a for a in argv if not a.startswith("-")]
    now = "--now" in argv
    if not args:
        print("systemctl (lab stand-in): a command is needed", file=sys.stderr)
        return 1
    cmd = args[0]
    if cmd == "daemon-reload":
        return 0
    if len(args) < 2:
        print(f"systemctl (lab stand-in): {cmd} needs a unit", file=sys.stderr)
        return 1
    unit = args[1] if args[1].endswith(".service") else args[1] + ".service"
    link = f"{WANTS}/{unit}"
    exists = os.path.exists(f"{UNIT_DIR}/{unit}")
    if cmd == "is-enabled":
        print("enabled" if os.path.lexists(link) else ("disabled" if exists else "not-found"))
        return 0 if os.path.lexists(link) else 1
    if cmd == "is-active":
        active = unit_pid(unit) is not None
        print("active" if active else "inactive")
        return 0 if active else 3
    if cmd in ("enable", "start", "restart") and not exists:
        print(f"Failed to {cmd} unit: Unit file {unit} does not exist.", file=sys.stderr)
        return 1
    if cmd == "enable":
        os.makedirs(WANTS, exist_ok=True)
        if not os.path.lexists(link):
            os.symlink(f"{UNIT_DIR}/{unit}", link)
        return start(unit) if now else 0
    if cmd == "disable":
        if os.path.lexists(link):
            os.unlink(link)
        return stop(unit) if now else 0
    if cmd in ("start", "stop", "restart"):
        return {"start": start, "stop": stop, "restart": restart}[cmd](unit)
    print(f"systemctl (lab stand-in): {cmd!r} is not supported here (lab/sparkctl_lab/hw/systemctl.py)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
