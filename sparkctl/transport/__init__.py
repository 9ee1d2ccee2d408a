"""How sparkctl reaches hosts: SSH (paramiko) and Docker Engine over that SSH connection."""

import sys


def _import_paramiko_without_invoke() -> None:
    """paramiko.config imports invoke (~0.1 s of a no-op `up`'s 1 s budget) only to run
    ssh_config's `Match exec`, and sparkctl reads no ssh config (the inventory is the truth).
    Import paramiko with invoke hidden; invoke stays importable for everything else."""
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError: paramiko records it and goes on
    try:
        import paramiko  # noqa: F401
    finally:
        del sys.modules["invoke"]


_import_paramiko_without_invoke()
