"""The names every launched container carries and the ports the launch itself fixes: what the
launch (launch/plan.py) sets, what the docker facts filter and read, and what the inventory's
validation keeps free."""

from __future__ import annotations

# the labels' namespace: <prefix>.cluster, .role, .config-hash (and .image, runtime/containers.py)
LABEL_PREFIX = "io.sparkctl"
RAY_PORT = 6379  # Ray's GCS on the head (`ray start --head --port`)
# written last in a directory of code sparkctl ships (runtime/code_ship.py: the gateway's code, the fleet
# door's wheels): a directory without it is a copy that was cut off, never taken for the code
SHIPPED_COMPLETE = ".complete"
