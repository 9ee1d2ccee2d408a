"""Engram step plans from recorded output parsed by the fact layer: RAM check, tmpfs mount, copy
of exactly the missing or corrupt files, SHA-256 verified; placed and matching is a no-op."""

from __future__ import annotations

from hostfacts import host_facts, inventory, sec

from sparkctl.facts.engram import MARKER, parse_changed_sums, parse_sums
from sparkctl.steps.base import RunContext
from sparkctl.steps.engram import EngramStep

A, B, C = "a" * 64, "b" * 64, "c" * 64
SUMS = f"{A}  ./table-000.bin\n{B}  ./table-001.bin\n"
MEMINFO = "MemTotal:       527380000 kB\nMemAvailable:   {avail} kB\n"
INV = inventory("splice-build")
HOST = INV.engram.host
SIZE = int(INV.engram.size_gib * (1 << 30))


def engram_section(mounted=True, marker=SUMS, sums=SUMS, files=("table-000.bin", "table-001.bin")) -> str:
    """The `engram` fact as engram_probe prints it."""
    listing = "".join(f"{n} 1000\n" for n in files)
    return (
        "@@mount\n" + (f"tmpfs {SIZE}\n" if mounted else "")
        + "@@marker\n" + (marker or "")
        + "@@sums\n" + (sums or "")
        + "@@source\n" + listing
        + "@@target\n" + (listing if mounted else "")
    )  # fmt: skip


def plan(avail_kb=500_000_000, hashes="unchanged table-000.bin\nunchanged table-001.bin\n", hashes_rc=0, **engram):
    f = host_facts(
        INV, HOST,
        meminfo=sec(MEMINFO.format(avail=avail_kb)),
        engram=sec(engram_section(**engram)),
        engram_hashes=sec(hashes, hashes_rc),
        engram_source_hashes=sec(""),  # the source ships SHA256SUMS: nothing computed
    )  # fmt: skip
    return EngramStep().plan(RunContext(inventory=INV, fleet=None, facts={HOST: f}))[HOST]


def test_parse_sums_accepts_sha256sum_output_with_and_without_dot_slash():
    assert parse_sums(f"{A}  ./t0\n{B} *t1\nnot a sum\n") == {"t0": A, "t1": B}


def test_unchanged_files_keep_the_hash_verified_at_placement():
    assert parse_changed_sums(f"unchanged t0\n{C}  t1\n", {"t0": A, "t1": B}) == {"t0": A, "t1": C}


def test_only_the_tables_changed_since_placement_are_hashed_again_on_real_files(tmp_path):
    import hashlib
    import subprocess

    from sparkctl.facts.engram import changed_checksum_command, stat_command

    for n in ("table-000.bin", "table-001.bin"):
        (tmp_path / n).write_bytes(n.encode())
    subprocess.run(["sh", "-c", stat_command(str(tmp_path))], check=True)
    (tmp_path / "table-001.bin").write_bytes(b"flipped")  # any write moves its ctime
    out = subprocess.run(["sh", "-c", changed_checksum_command(str(tmp_path))], capture_output=True, text=True).stdout
    placed = {"table-000.bin": A, "table-001.bin": B}
    assert parse_changed_sums(out, placed) == {"table-000.bin": A, "table-001.bin": hashlib.sha256(b"flipped").hexdigest()}


def test_fresh_host_mounts_then_copies_every_file():
    p = plan(mounted=False, marker="", hashes="", hashes_rc=1)
    assert [ch.action for ch in p.changes] == ["mount", "copy"]
    assert p.changes[0].data["bytes"] == SIZE
    assert p.changes[1].data["files"] == ["table-000.bin", "table-001.bin"]


def test_not_enough_free_ram_blocks_before_anything_changes():
    p = plan(avail_kb=10 * 1024 * 1024, mounted=False, marker="", hashes="", hashes_rc=1)
    assert p.blocked and "10.0 GiB RAM available" in p.blocked


def test_placed_and_matching_is_a_noop_with_the_reason():
    p = plan()
    assert p.empty and "every SHA-256 matches" in p.reason


def test_a_flipped_byte_copies_only_that_file_again():
    # same size, so only its moved ctime makes the fact re-hash it, and the hash differs
    p = plan(hashes=f"unchanged table-000.bin\n{C}  table-001.bin\n")
    assert [ch.action for ch in p.changes] == ["copy"]
    assert p.changes[0].data["files"] == ["table-001.bin"]
    assert "1 with a wrong SHA-256" in p.changes[0].summary


def test_a_missing_file_copies_only_that_file():
    p = plan(hashes="unchanged table-000.bin\n", files=("table-000.bin",))
    assert p.changes[0].data["files"] == ["table-001.bin"] and "1 missing" in p.changes[0].summary


def test_rehashed_files_that_match_only_refresh_the_record():
    p = plan(hashes=f"{A}  table-000.bin\nunchanged table-001.bin\n")
    assert [ch.action for ch in p.changes] == ["mark"]
    assert MARKER in EngramStep().plan(RunContext(inventory=INV, fleet=None, facts={HOST: host_facts(
        INV, HOST, meminfo=sec(MEMINFO.format(avail=1)), engram=sec(engram_section(marker="")),
        engram_hashes=sec(f"{A}  table-000.bin\n{B}  table-001.bin\n"), engram_source_hashes=sec(""))}))[HOST].changes[0].summary  # fmt: skip


def test_missing_source_blocks():
    p = plan(sums="", files=())
    assert p.blocked and "no Engram tables" in p.blocked
