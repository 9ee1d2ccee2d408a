"""Which runbook answers a doctor result or an alert (docs/runbooks/<name>.md).

A runbook is named after the check that finds its failure (`fabric.mtu.md`), or after the failure
when one check finds several (runtime.engine: a device-side assert or a lost worker) or when only
an alert sees it (`kv-cache-full.md`). Checks never hold the link themselves: it is derived here
from the check's name and the cause it reports, so a new runbook file is picked up without
touching the checks.

Where an operator reads one: `sparkctl runbook NAME` prints it from the package (a wheel has no
docs/ folder), and with `alerts.runbook_base_url` set (where the team publishes docs/runbooks/) the
alerts' runbook_url and doctor's runbook lines are that URL instead (`link`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sparkctl.resources import data_dir

# Package data (so an installed wheel has them); in a checkout it links to docs/runbooks.
RUNBOOK_DIR = Path(str(data_dir("runbooks"))).resolve()  # an installed package's folder: a real path
RUNBOOK_PREFIX = "docs/runbooks/"

# (check, the `sign` its finding reports) -> runbook: one check, several causes
BY_CAUSE = {
    ("runtime.engine", "device_assert"): "engine-crash",
    ("runtime.engine", "engine_fatal"): "engine-crash",
    ("runtime.engine", "worker_died"): "worker-lost",
    ("runtime.engine", "peer_lost"): "worker-lost",
}
# checks that see the symptom of a failure whose runbook is named after the failure
BY_CHECK = {
    "runtime.containers": "runtime-down",
    "runtime.peer": "worker-lost",
    "runtime.health": "runtime-down",
    "runtime.metrics": "kv-cache-full",  # it warns only on a nearly full KV pool
    "runtime.kv_pool": "kv-cache-full",
    "engram.checksums": "engram.placed",
    "runtime.spec_acceptance": "spec-acceptance-low",
    "runtime.queue": "long-ttft",
    "runtime.ttft": "long-ttft",
    "runtime.progress": "engine-stalled",
    "gateway.answers": "gateway-down",
    "gateway.upstream": "gateway-down",
    "gateway.holding": "gateway-holding",
    "gateway.engine": "runtime-down",
    "gateway.zero_tokens": "gateway-zero-tokens",
}


def exists(name: str) -> bool:
    return (RUNBOOK_DIR / f"{name}.md").is_file()


def path(name: str) -> str:
    return f"{RUNBOOK_PREFIX}{name}.md"


def for_check(check: str, sign: Optional[str] = None) -> Optional[str]:
    """The runbook's path for a check's finding, or None when it has none yet."""
    for name in (BY_CAUSE.get((check, sign or "")), BY_CHECK.get(check), check):
        if name and exists(name):
            return path(name)
    return None


def for_result(result) -> Optional[str]:
    """The runbook of a doctor CheckResult (its own link first, else derived from its name and cause)."""
    return result.runbook or for_check(result.name, (result.data or {}).get("sign"))


def all_names() -> list[str]:
    return sorted(p.stem for p in RUNBOOK_DIR.glob("*.md") if p.stem != "README")


def name_of(book: str) -> str:
    """fabric.mtu from docs/runbooks/fabric.mtu.md (what for_check gives), fabric.mtu.md or fabric.mtu."""
    return book.removeprefix(RUNBOOK_PREFIX).removesuffix(".md")


def command(name: str) -> str:
    return f"sparkctl runbook {name}"


def link(book: str, base_url: Optional[str] = None) -> str:
    """What to follow for a runbook: its published URL when the inventory sets alerts.runbook_base_url,
    else the command that prints it (works wherever sparkctl is installed; a repo path or a file://
    URL into site-packages does not)."""
    name = name_of(book)
    return f"{base_url}{name}.md" if base_url else command(name)


def resolve(query: str) -> Optional[str]:
    """The runbook a name, a file name, a docs/runbooks/ path or a check's name stands for, or None."""
    name = name_of(query.strip())
    if name != "README" and exists(name):
        return name
    book = for_check(name)
    return name_of(book) if book else None


def text(name: str) -> str:
    return (RUNBOOK_DIR / f"{name}.md").read_text()


def title(name: str) -> str:
    """The runbook's first heading, without the '# ' and its name (one line for a listing)."""
    first = next((line for line in text(name).splitlines() if line.startswith("# ")), "")
    return first[2:].removeprefix(f"{name}:").strip()
