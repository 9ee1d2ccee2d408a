"""The lab: a simulated DGX Spark cluster (head, worker, offload) on one Linux machine.

Each host is a PID-1 init in its own network, mount, UTS and PID namespaces with a real sshd
and a real dockerd, joined by veth "cables" shaped like the ConnectX-7 fabric, plus a
management bridge and a local registry. The public entry points are in `sparkctl_lab.api`;
`sparkctl lab up | down | status | fault` drives them. The runtime simulator that the lab's
image carries lives in `sparkctl_lab.sim` (a separate, stdlib-only package).

Kept import-free: the host init and the simulated hardware tools import this package with
only the standard library available.
"""
