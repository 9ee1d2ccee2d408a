"""doctor's default output for a person, rendered at 80 columns from facts recorded on the lab.

A line per check group with each host's counts; only what is not ok is expanded (message, fix,
runbook); `-v` prints every row. The recorded facts are real tool output (tests/unit/recorded/doctor).
"""

from __future__ import annotations

import io
import re

from rich.console import Console
from test_checks import run, sections

from sparkctl.checks import GROUPS
from sparkctl.checks.doctor import Report
from sparkctl.cli.doctor import print_report, print_summary

HOSTS = ["head", "worker", "offload"]


def render(results, printer=print_summary, width: int = 80, **kw) -> list[str]:
    c = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    printer(Report(results, HOSTS, 0.61), c, **kw)
    return [line.rstrip() for line in c.export_text().splitlines()]


def flat(lines: list[str]) -> str:
    """The text as a person reads it: wrapped lines joined again."""
    return re.sub(r"\s+", " ", " ".join(lines))


def test_healthy_fits_one_screen_with_a_line_per_group():
    results = run(sections())
    lines = render(results)
    assert len(lines) <= 40, "\n".join(lines)
    assert max(len(line) for line in lines) <= 80
    by_group = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in GROUPS}
    assert set(by_group) == set(GROUPS)
    assert "✓ 21" in by_group["fabric"]  # the counts of every rail check on a host
    # nothing failed, so no fix is printed; the healthy lab's warning is shown once for all hosts
    assert "✗" not in flat(lines)
    assert sum(1 for line in lines if "host.memlock" in line) == 1
    assert "host.memlock on head, worker, offload" in flat(lines)


def test_one_fault_is_expanded_in_full_with_fix_and_runbook():
    results = run(sections("wrong-mtu"))
    lines = render(results)
    mtu = next(r for r in results if r.name == "fabric.mtu" and r.status == "failed")
    text = flat(lines)
    assert re.sub(r"\s+", " ", mtu.message) in text
    assert re.sub(r"\s+", " ", mtu.fix) in text
    assert "runbook: sparkctl runbook fabric.mtu" in text
    assert max(len(line) for line in lines) <= 80
    # check names are never broken across lines
    assert any(line.startswith("✗ fabric.mtu ") for line in lines)
    assert re.search(r"^fabric\s.*✗ 2", "\n".join(lines), re.M)  # the worker's fabric line counts its two failures
    # the cause is listed before its effect, ok rows are not listed at all
    assert text.index("✗ fabric.mtu") < text.index("✗ fabric.ping")
    listed = {line.split()[1] for line in lines if line[:2] in ("✗ ", "! ")}
    assert listed == {r.name for r in results if r.status in ("failed", "warn")} and "fabric.mtu" in listed
    assert lines[-1].startswith("failed: fabric.mtu, fabric.ping")


def test_verbose_prints_every_row():
    results = run(sections())
    text = "\n".join(render(results, print_report, width=200))
    for r in results:
        assert r.name in text
    assert len(render(results, print_report, width=200)) > 100


def test_the_runbook_link_is_the_published_url_when_the_inventory_has_one():
    results = run(sections("wrong-mtu"))
    base = "https://git.example.com/ops/sparkctl/-/blob/main/docs/runbooks/"
    for printer in (print_summary, print_report):
        text = flat(render(results, printer, width=200, runbook_base_url=base))
        assert f"runbook: {base}fabric.mtu.md" in text and "docs/runbooks/fabric.mtu.md" not in text.replace(base, "")


def test_a_failure_is_called_failed_wherever_a_user_reads_it():
    """One word for users: a check `failed` as a step does (up/reload recaps, the journal); doctor's
    --json says so from schema_version 2 on (the unversioned document said "fail")."""
    import typing

    from sparkctl.checks.base import Status as CheckStatus
    from sparkctl.steps.base import Status as StepStatus

    results = run(sections("wrong-mtu"))
    failed = [r for r in results if r.status == "failed"]
    assert failed and "failed" in typing.get_args(CheckStatus) and "failed" in typing.get_args(StepStatus)
    assert "fail" not in typing.get_args(CheckStatus)
    assert re.search(rf"\b{len(failed)} failed\b", render(results)[-2])  # the totals line
    rows = [line for line in render(results, print_report, width=200) if line.startswith("fabric.mtu")]
    assert any(re.search(r"│ failed\s+│ enp1s0f0np0 has MTU 1500", line) for line in rows), rows  # -v's status column
    doc = Report(results, HOSTS, 0.61).to_dict()
    assert doc["schema_version"] == 2 and doc["summary"]["failed"] == len(failed)
    assert {c["status"] for c in doc["checks"]} <= {"ok", "warn", "failed", "skipped"}
