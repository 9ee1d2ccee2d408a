"""Where a fleet's front door lives on its host: vllm-router's container and the wheels unpacked
for it. Shared by the launch (fleet/router_launch.py), the door step that ships the wheel
(fleet/router_step.py) and the facts that read both back (facts/fleet_door.py)."""

from __future__ import annotations

# the name the fleet's front door has always had on its host: a sparkctl upgrade replaces the old
# door in place (another name would leave it holding the port)
CONTAINER = "sparkctl-fleet-door"
ROLE = "fleet-door"
FLEET_LABEL = "io.sparkctl.fleet"
WHEEL_ROOT = "/var/lib/sparkctl/fleet-router"  # unpacked wheels by content hash (a rollback finds its own)
