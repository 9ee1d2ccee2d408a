"""Where the gateway lives on the head: names shared by the gateway's launch (runtime/launch.py),
the steps that talk to it and doctor. Standard library only (the gateway package is shipped to
the head and imported there without the rest of sparkctl)."""

from __future__ import annotations

CONTAINER = "sparkctl-gateway"
ROLE = "gateway"
# the admin socket's directory on the head, bind-mounted into the container at the same path:
# 0700 root, so only root on the head (sparkctl over SSH) reaches it
ADMIN_DIR = "/run/sparkctl-gateway"
ADMIN_SOCKET = f"{ADMIN_DIR}/admin.sock"
# the gateway's code from the sparkctl wheel, content-addressed on the head (several versions
# side by side: a rollback finds its own), mounted read-only where the container imports it
CODE_ROOT = "/var/lib/sparkctl/gateway-code"
CONTAINER_CODE = "/opt/sparkctl-gateway"
METRICS_PATH = "/gateway/metrics"
# the engine itself through the gateway, never held: sparkctl's own checks (the engine listens on loopback)
ENGINE_PATH = "/gateway/engine"
# gateway.api_keys_file, bind-mounted read-only here
CONTAINER_KEYS_FILE = "/etc/sparkctl-gateway/api-keys"
