"""Where the gateway lives on the head: its container, code, admin socket and routes, shared by
the gateway itself (server.py serves the routes), its launch (launch/plan.py), the facts and
checks that read it and the steps that talk to it. Standard library only: shipped to the head
with the gateway package (launch/gateway_code.py) and imported there without the rest of sparkctl."""

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
# the engine's own key (its VLLM_API_KEY), handed to the gateway in this environment variable
# (never argv): the gateway sends it upstream
ENGINE_KEY_ENV = "SPARKCTL_GATEWAY_ENGINE_API_KEY"


def parse_keys(text: str) -> list[str]:
    """A keys file's keys (gateway.api_keys_file, read by the gateway and by sparkctl's own calls):
    one a line, blank lines and `#` comments skipped."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
