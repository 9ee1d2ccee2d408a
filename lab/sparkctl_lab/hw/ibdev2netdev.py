"""`ibdev2netdev` for a lab host: RDMA device -> net device, (Up)/(Down) from the netdev's real state.

Like Mellanox's script, the (Up)/(Down) is the net device's operstate; `-v` adds the bus id,
the adapter and the RDMA port state (which an `rdma-down` fault can force to DOWN).
"""

from __future__ import annotations

import sys

from sparkctl_lab.hw import state


def main(argv: list[str]) -> int:
    host = state.current_host()
    faults = state.load_faults(host.name)
    verbose = False
    for a in argv:
        if a == "-v":
            verbose = True
        elif a in ("-h", "--help"):
            sys.stdout.write("usage: ibdev2netdev [-v] [-h]\n")
            return 0
        else:
            sys.stderr.write(f"ibdev2netdev: unknown option {a}\nusage: ibdev2netdev [-v] [-h]\n")
            return 1
    rows = []
    for n in host.fabric:
        op = state.sysfs_operstate(n.device)
        for r in n.rdma:
            link = "Up" if op == "up" else "Down"
            if verbose:
                _, port = state.rdma_state(r, faults, op)
                card = "MT4129 - NVD0000000088" if host.role != "offload" else "MT4129 - MCX755106AS-HEAT"
                rows.append((r, f"{n.bus_id} {r} ({card}) fw 28.44.1036 port 1 ({port}) ==> {n.device} ({link})"))
            else:
                rows.append((r, f"{r} port 1 ==> {n.device} ({link})"))
    for _, line in sorted(rows):
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
