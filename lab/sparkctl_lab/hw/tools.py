"""The wrappers that put the simulated tools on a lab host's PATH (inside its mount namespace only).

Each host gets LAB_DIR/hosts/<h>/bin, overlaid on /usr/local/bin inside the host, so sshd
sessions, dockerd and `host_exec` find them with the default PATH; the real machine's PATH
never sees them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sparkctl_lab import paths

TOOLS = {
    "nvidia-smi": "sparkctl_lab.hw.nvidia_smi",
    "ibdev2netdev": "sparkctl_lab.hw.ibdev2netdev",
    "ethtool": "sparkctl_lab.hw.ethtool",
    # no systemd on a lab host: the stand-in the keeper's unit runs under (hw/systemctl.py)
    "systemctl": "sparkctl_lab.hw.systemctl",
}

# dockerd 20.10 registers its "nvidia" device driver (so `--gpus all` works) when this is on its
# PATH, and runs it as an OCI prestart hook; the lab has no GPU to hand over, so it only drains
# the container state runc writes to it.
GPU_HOOK = "nvidia-container-runtime-hook"


def package_root() -> str:
    """PYTHONPATH for the wrappers and host inits (run with -S, no site-packages): the folders
    holding the `sparkctl_lab` and `sparkctl` packages."""
    import sparkctl

    roots = [Path(__file__).resolve().parents[2], Path(sparkctl.__file__).resolve().parents[1]]
    return ":".join(dict.fromkeys(str(r) for r in roots))


def scripts(host: str) -> dict[str, str]:
    """The host's bin folder: file name -> shell script."""
    out = {
        name: "#!/bin/sh\n"
        f"# sparkctl lab: simulated {name} for lab host {host}\n"
        f"SPARKCTL_LAB_HOST={host} SPARKCTL_LAB_DIR={paths.LAB_DIR} SPARKCTL_LAB_INSTANCE={paths.INSTANCE} PYTHONPATH={package_root()} "
        f'exec {sys.executable} -S -m {module} "$@"\n'
        for name, module in TOOLS.items()
    }
    # sparkctl as an operator installs it on a DGX OS head for the keeper (docs/keeper.md): this
    # checkout's, with its interpreter and site-packages, fenced to loopback and the lab
    out["sparkctl"] = (
        "#!/bin/sh\n# sparkctl lab: this checkout's sparkctl, as installed on a head for the keeper\n"
        'SPARKCTL_ONLY_NETWORKS="${SPARKCTL_ONLY_NETWORKS:-127.0.0.0/8,10.231.0.0/16}" '
        f'PYTHONPATH={package_root()} exec {sys.executable} -m sparkctl "$@"\n'
    )
    out[GPU_HOOK] = "#!/bin/sh\n# sparkctl lab: no GPU to hand over\ncat >/dev/null\nexit 0\n"
    return out
