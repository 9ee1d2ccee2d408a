"""Runbooks: every one is reachable from a doctor check or an alert, and the on-call pages have
the sections an operator looks for (what you see, confirm, fix, verify, escalate)."""

from __future__ import annotations

import re

import pytest
from test_alerts import inventory

from sparkctl import runbooks
from sparkctl.alerts.rules import rules_for
from sparkctl.checks import REGISTRY

SECTIONS = ("**What you see.**", "**Confirm.**", "**Fix.**", "**Verify.**", "**Escalate**")
# the failures the on-call issue lists
ON_CALL = [
    "caches.compile", "fabric.link", "fabric.mtu", "fabric.address", "images.same", "engine-crash",
    "runtime.moe_backend", "spec-acceptance-low", "kv-cache-full", "long-ttft", "engram.placed", "worker-lost",
    "runtime.drafter", "ssh.reachable", "runtime-down", "state.lock", "state.last_reload",
]  # fmt: skip


def reachable() -> dict[str, str]:
    """runbook -> the first check or alert that links it."""
    out: dict[str, str] = {}
    for rule in rules_for(inventory()).rules:
        out.setdefault(rule.runbook, rule.alert)
    for name in REGISTRY:
        book = runbooks.for_check(name)
        if book:
            out.setdefault(book.removeprefix(runbooks.RUNBOOK_PREFIX).removesuffix(".md"), name)
    for (name, sign), book in runbooks.BY_CAUSE.items():
        out.setdefault(book, f"{name} ({sign})")
    return out


def test_every_runbook_is_reachable_from_a_check_or_an_alert():
    links = reachable()
    orphans = [n for n in runbooks.all_names() if n not in links]
    assert orphans == []


@pytest.mark.parametrize("name", ON_CALL)
def test_on_call_runbook_has_every_section(name):
    text = (runbooks.RUNBOOK_DIR / f"{name}.md").read_text()
    missing = [s for s in SECTIONS if s not in text]
    assert missing == [], f"{name}.md lacks {missing}"
    assert re.search(r"`(sparkctl|Sparkctl)\w*", text), "names a command or an alert"


def test_derived_links_by_cause():
    assert runbooks.for_check("runtime.engine", "device_assert") == "docs/runbooks/engine-crash.md"
    assert runbooks.for_check("runtime.engine", "worker_died") == "docs/runbooks/worker-lost.md"
    assert runbooks.for_check("runtime.health") == "docs/runbooks/runtime-down.md"
    assert runbooks.for_check("fabric.mtu") == "docs/runbooks/fabric.mtu.md"
    assert runbooks.for_check("ssh.clock") is None  # no page yet: doctor prints no runbook line


def test_readme_table_links_existing_pages():
    text = (runbooks.RUNBOOK_DIR / "README.md").read_text()
    for target in re.findall(r"\]\(([^)]+\.md)\)", text):
        assert (runbooks.RUNBOOK_DIR / target).is_file(), target
