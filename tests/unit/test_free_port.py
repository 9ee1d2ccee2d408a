"""harness.free_port hands out ports no other test process gets: the four pytest processes of
`./dev.sh test` (and .ci/floors beside them) each start servers on ports so found. The old
"bind port 0, close, return it" let the kernel hand the same port to the next process that asked
(a fresh-clone CI died on EADDRINUSE in test_sim_cli)."""

from __future__ import annotations

import socket
import subprocess
import sys

from sparkctl_lab.sim import harness

ALLOCATE = "from sparkctl_lab.sim import harness; print(' '.join(str(harness.free_port()) for _ in range(60)))"


def test_ports_from_processes_side_by_side_never_repeat_and_stay_out_of_the_kernels_range():
    procs = [subprocess.Popen([sys.executable, "-c", ALLOCATE], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    ports = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert len(ports) == 240
    assert len(set(ports)) == 240, "a port was handed to two callers"
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    # the kernel picks port-0 binds and outgoing connections' ports at or above this
    assert max(ports) < ephemeral_low


def test_a_port_someone_listens_on_is_skipped():
    port = harness.free_port()
    with socket.create_server(("127.0.0.1", port + 1 if port + 1 < harness.PORT_RANGE[1] else harness.PORT_RANGE[0])) as busy:
        taken = busy.getsockname()[1]
        assert harness.free_port() != taken
