"""Engram step plans: RAM check, tmpfs mount, copy + checksum; placed and matching is a no-op."""

from __future__ import annotations

from pathlib import Path

from sparkctl.facts.probe import Section
from sparkctl.inventory.loader import load_inventory
from sparkctl.steps.base import RunContext
from sparkctl.steps.engram import EngramStep, parse_sums

ROOT = Path(__file__).resolve().parents[2]
A, B = "a" * 64, "b" * 64
SUMS = f"{A}  ./table-000.bin\n{B}  ./table-001.bin\n"
MEMINFO = "MemTotal:       527380000 kB\nMemAvailable:   {avail} kB\n"
DF_TMPFS = "Type 1B-blocks\ntmpfs {size}\n"


def ctx(avail_kb=500_000_000, mount=None, placed=None, sums=SUMS):
    facts = {
        "meminfo": Section(0, MEMINFO.format(avail=avail_kb)),
        "mount": Section(0, mount) if mount else Section(1, ""),
        "source_sums": Section(0, sums),
        "placed": Section(0, placed) if placed is not None else Section(1, "No such file or directory"),
    }
    inv = load_inventory(ROOT / "inventories" / "splice-build.yaml")
    return RunContext(inventory=inv, fleet=None, facts={inv.engram.host: facts})


def host(c):
    return c.inventory.engram.host


def test_parse_sums_accepts_sha256sum_output_with_and_without_dot_slash():
    assert parse_sums(f"{A}  ./t0\n{B} *t1\nnot a sum\n") == {"t0": A, "t1": B}


def test_fresh_host_mounts_then_copies():
    c = ctx()
    plan = EngramStep().plan(c, host(c))
    assert [ch.action for ch in plan.changes] == ["mount", "copy"]
    assert plan.changes[0].data["bytes"] == int(c.inventory.engram.size_gib * (1 << 30))


def test_not_enough_free_ram_blocks_before_anything_changes():
    c = ctx(avail_kb=10 * 1024 * 1024)
    plan = EngramStep().plan(c, host(c))
    assert plan.blocked and "10.0 GiB RAM available" in plan.blocked


def test_placed_and_matching_is_a_noop_with_the_reason():
    c = ctx()
    size = int(c.inventory.engram.size_gib * (1 << 30))
    plan = EngramStep().plan(ctx(mount=DF_TMPFS.format(size=size), placed=f"{A}  table-000.bin\n{B}  table-001.bin\n"), host(c))
    assert plan.empty and "sums match" in plan.reason


def test_mounted_but_stale_tables_copy_again_without_remounting():
    c = ctx()
    size = int(c.inventory.engram.size_gib * (1 << 30))
    plan = EngramStep().plan(ctx(mount=DF_TMPFS.format(size=size), placed=f"{A}  table-000.bin\n"), host(c))
    assert [ch.action for ch in plan.changes] == ["copy"]


def test_missing_source_blocks():
    c = ctx(sums="")
    plan = EngramStep().plan(c, host(c))
    assert plan.blocked and "no Engram tables" in plan.blocked
