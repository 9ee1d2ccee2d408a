"""Doctor's checks: small pure functions over the inventory and facts, each with a stable name.

Importing this package registers every check in `base.REGISTRY`, in the order doctor shows them.
"""

from sparkctl.checks import ssh, host, gpu, fabric, env, images, caches, engram, runtime  # noqa: F401  (registration)
from sparkctl.checks.base import REGISTRY, CheckResult, Context  # noqa: F401

GROUPS = ("ssh", "host", "gpu", "fabric", "env", "images", "caches", "engram", "runtime")
