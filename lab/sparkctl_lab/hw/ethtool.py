"""`ethtool <if>` and `ethtool -i <if>` for a lab host, with the simulated link speed.

The speed is the NIC's nominal one (200 Gb/s per ConnectX-7 rail), also on a degraded rail (the
`speed` fault shapes its traffic, not what it reports, as on a real capped ConnectX-7); a link
that is not up reports `Speed: Unknown!` and `Link detected: no`, as mlx5 does.
"""

from __future__ import annotations

import sys

from sparkctl_lab.hw import state


def settings(host, faults, dev: str) -> str:
    op = state.sysfs_operstate(dev)
    nominal = state.nominal_speed(host, dev)
    lines = [f"Settings for {dev}:"]
    if nominal is None:  # lo and friends: nothing but the link
        lines.append(f"\tLink detected: {'yes' if op in ('up', 'unknown') else 'no'}")
        return "\n".join(lines) + "\n"
    mbps = state.speed(host, dev, faults, op)
    fabric = dev != host.mgmt_device
    modes = "200000baseCR4/Full" if nominal >= 200000 else ("40000baseCR4/Full" if nominal >= 40000 else f"{nominal}baseT/Full")
    lines += [
        "\tSupported ports: [ " + ("FIBRE" if fabric else "TP") + " ]",
        f"\tSupported link modes:   {modes}",
        "\tSupported pause frame use: Symmetric",
        "\tSupports auto-negotiation: Yes",
        f"\tAdvertised link modes:  {modes}",
        "\tAdvertised auto-negotiation: Yes",
        f"\tSpeed: {mbps}Mb/s" if mbps > 0 else "\tSpeed: Unknown!",
        "\tDuplex: Full" if mbps > 0 else "\tDuplex: Unknown! (255)",
        "\tAuto-negotiation: on",
        "\tPort: " + ("Direct Attach Copper" if fabric else "Twisted Pair"),
        "\tPHYAD: 0",
        "\tTransceiver: internal",
        f"\tLink detected: {'yes' if op == 'up' else 'no'}",
    ]
    return "\n".join(lines) + "\n"


def driver_info(host, dev: str) -> str:
    nic = next((n for n in host.fabric if n.device == dev), None)
    if nic is not None:
        drv, ver, fw, bus = "mlx5_core", "24.10-1.1.4", "28.44.1036 (NVD0000000088)", nic.bus_id
    else:
        drv, ver, fw, bus = ("r8127" if host.role != "offload" else "igb"), "6.11.0", "", host.mgmt_bus_id
    return (
        f"driver: {drv}\nversion: {ver}\nfirmware-version: {fw}\nexpansion-rom-version: \nbus-info: {bus}\n"
        "supports-statistics: yes\nsupports-test: yes\nsupports-eeprom-access: no\n"
        "supports-register-dump: no\nsupports-priv-flags: yes\n"
    )


def main(argv: list[str]) -> int:
    host = state.current_host()
    faults = state.load_faults(host.name)
    driver = len(argv) == 2 and argv[0] in ("-i", "--driver")
    if driver or (len(argv) == 1 and not argv[0].startswith("-")):
        dev = argv[-1]
        if state.sysfs_operstate(dev) == "absent":
            sys.stderr.write("netlink error: no device matches name (offset 24)\nnetlink error: No such device\n")
            return 1
        sys.stdout.write(driver_info(host, dev) if driver else settings(host, faults, dev))
        return 0
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(
            "ethtool DEVNAME\tDisplay standard information about device\nethtool -i|--driver DEVNAME\tShow driver information\n"
        )
        return 0
    sys.stderr.write("ethtool: bad command line argument(s)\nFor more information run ethtool -h\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
