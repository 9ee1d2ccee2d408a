"""How many Spark pairs the lab has: its state, kept in LAB_DIR/clusters (absent, on a fresh lab: 1).

`lab up --clusters N` sets it, a plain `lab up` keeps it, `lab down` forgets it with LAB_DIR.
"""

from __future__ import annotations

from sparkctl.errors import InputError, SparkctlError
from sparkctl_lab import paths
from sparkctl_lab import topology as topo


def check(n: int) -> int:
    """N itself, or an error (exit 2) before anything is touched."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= topo.MAX_CLUSTERS:
        raise InputError(
            f"--clusters {n}: the lab has 1 or {topo.MAX_CLUSTERS} Spark pairs (1: head, worker, offload; "
            f"2: and head2, worker2 for a fleet)",
            fix="sparkctl lab up --clusters 2   (back to one pair: sparkctl lab up --clusters 1)",
        )
    return n


def saved() -> int | None:
    """The saved number of pairs: 1 when nothing is saved, None when the file holds something else
    (an explicit `lab up --clusters N` still repairs that lab)."""
    try:
        text = paths.CLUSTERS_FILE.read_text().strip()
    except FileNotFoundError:
        return 1
    try:
        return check(int(text))
    except (ValueError, InputError):
        return None


def count() -> int:
    """The lab's number of pairs (1 when nothing says otherwise)."""
    n = saved()
    if n is None:
        text = paths.CLUSTERS_FILE.read_text().strip()
        raise SparkctlError(
            f"{paths.CLUSTERS_FILE} holds {text!r}, not a number of Spark pairs (1..{topo.MAX_CLUSTERS})",
            fix="sparkctl lab up --clusters 1 (or 2) writes it again",
        )
    return n


def save(n: int) -> None:
    paths.CLUSTERS_FILE.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.CLUSTERS_FILE.with_name(paths.CLUSTERS_FILE.name + ".tmp")
    tmp.write_text(f"{check(n)}\n")
    tmp.replace(paths.CLUSTERS_FILE)


def hosts() -> dict[str, topo.LabHost]:
    """The hosts the lab has now (its count's), in topology order."""
    return topo.hosts(count())
