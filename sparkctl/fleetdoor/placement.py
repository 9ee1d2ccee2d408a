"""Where the fleet's front door lives on its host: names shared by its launch (fleet/door_step.py),
the admin calls over SSH (fleet/door_admin.py) and the program. Standard library only."""

from __future__ import annotations

CONTAINER = "sparkctl-fleet-door"
ROLE = "fleet-door"
# the admin socket's directory, bind-mounted into the container at the same path: 0700 root
ADMIN_DIR = "/run/sparkctl-fleet-door"
ADMIN_SOCKET = f"{ADMIN_DIR}/admin.sock"
# its code (sparkctl.fleetdoor + sparkctl.gateway from the sparkctl that deploys it), content-addressed
CODE_ROOT = "/var/lib/sparkctl/fleet-door-code"
CONTAINER_CODE = "/opt/sparkctl-fleet-door"
METRICS_PATH = "/fleetdoor/metrics"
