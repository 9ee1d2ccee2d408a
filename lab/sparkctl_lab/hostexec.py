"""Running a command inside a lab host: its net, mount, UTS and PID namespaces, by nsenter into
the host's PID 1. Faults, drills, the lab's Prometheus and the tests all use it; a module of its
own so none of them imports another for it.
"""

from __future__ import annotations

import subprocess

from sparkctl.errors import InputError, SparkctlError
from sparkctl_lab import preflight, procs
from sparkctl_lab import topology as topo
from sparkctl_lab.topology import ALL_HOSTS, SECOND_PAIR

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def lab_host(name: str) -> topo.LabHost:
    """The lab host `name`, or an error naming the hosts there are."""
    if name not in ALL_HOSTS:
        raise InputError(f"unknown lab host {name!r}", fix=f"use one of: {', '.join(ALL_HOSTS)}")
    return ALL_HOSTS[name]


def init_pid(name: str) -> int:
    """The host init's PID (its namespaces are the host), or an error: the lab is not up."""
    pid = procs.host_init(name)
    if pid is None:
        if name in SECOND_PAIR:
            raise SparkctlError(
                f"lab host {name} is not running (it is in the lab's second pair)", fix="run `sparkctl lab up --clusters 2`"
            )
        raise SparkctlError(f"lab host {name} is not running", fix="run `sparkctl lab up`")
    return pid


def host_exec(
    host: str, argv: list[str], input: str | None = None, timeout: float = 60, check: bool = False
) -> subprocess.CompletedProcess:
    """Run argv inside a lab host (its net, mount, UTS and PID namespaces), as root in /root."""
    preflight.require_root("host_exec")
    lab_host(host)
    pid = init_pid(host)
    env = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"}
    r = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "-m", "-u", "-p", "--wd=/root", "--", *argv],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and r.returncode != 0:
        raise SparkctlError(f"{host}: `{' '.join(argv)}` exited {r.returncode}: {r.stderr.strip()}")
    return r
