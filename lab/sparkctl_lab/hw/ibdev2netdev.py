"""`ibdev2netdev` for a lab host: RDMA device -> net device, (Up)/(Down) from the netdev's real state.

Like Mellanox's script, it lists every RDMA function of the adapter, not only the cabled ones: a
Spark's ConnectX-7 shows four (two PCIe twins per QSFP port, `rocep1s0f0`, `rocep1s0f1`,
`roceP2p1s0f0`, `roceP2p1s0f1`), sorted as the script's `ls` sorts them (uppercase first). The
(Up)/(Down) is the net device's carrier (a device that is absent or admin-down reads Down); `-v`
adds the bus id, the adapter and the RDMA port state padded to six columns (`printf "%-6s"`:
`(ACTIVE)`, `(DOWN  )`), which an `rdma-down` fault can force to DOWN.
"""

from __future__ import annotations

import sys

from sparkctl_lab.hw import state

# a DGX Spark's ConnectX-7: RDMA device, net device, PCI function (ibdev2netdev on a Spark)
SPARK_FUNCTIONS = (
    ("rocep1s0f0", "enp1s0f0np0", "0000:01:00.0"),
    ("rocep1s0f1", "enp1s0f1np1", "0000:01:00.1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0", "0002:01:00.0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1", "0002:01:00.1"),
)


def functions(host) -> list[tuple[str, str, str]]:
    """(rdma, netdev, bus id) of every RDMA function the host's adapter has."""
    if host.role in ("head", "worker"):
        return list(SPARK_FUNCTIONS)
    return [(r, n.device, n.bus_id) for n in host.fabric for r in n.rdma]


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
    for r, dev, bus in functions(host):
        op = state.sysfs_operstate(dev)
        link = "Up" if op == "up" else "Down"
        if verbose:
            _, port = state.rdma_state(r, faults, op)
            card = "MT4129 - NVD0000000088" if host.role != "offload" else "MT4129 - MCX755106AS-HEAT"
            rows.append((r, f"{bus} {r} ({card}) {'':15} fw 28.45.4028 port 1 ({port:<6}) ==> {dev} ({link})"))
        else:
            rows.append((r, f"{r} port 1 ==> {dev} ({link})"))
    for _, line in sorted(rows):
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
