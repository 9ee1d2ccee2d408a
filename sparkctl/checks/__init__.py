"""Doctor's checks: small pure functions over the inventory and facts, each with a stable name.

Importing this package registers every check in `base.REGISTRY`, in the order doctor shows them.
Each checks module declares READS: the fact kinds (sparkctl/facts/base.py registry) its checks read, which
doctor gathers for them.
"""

# the order of registration is the order doctor shows the groups in: not sorted
# isort: off
from sparkctl.checks import ssh, host, gpu, fabric, env, images, caches, engram, weights, runtime, gateway, state, keeper, fleet  # noqa: F401  (registration)

# isort: on
from sparkctl.checks.base import REGISTRY, CheckResult, Context  # noqa: F401

# a cluster's groups, in the order of the imports above (the fleet checks are `sparkctl fleet doctor`'s)
GROUPS = tuple(dict.fromkeys(c.group for c in REGISTRY.values() if not c.fleet))
GROUP_READS = {g: globals()[g].READS for g in GROUPS}


def kinds_for(groups) -> set[str]:
    """The fact kinds doctor gathers for these check groups."""
    return set().union(*(GROUP_READS[g] for g in groups))
