"""A fact is one registered object (facts/base.py): a new kind defined in one module (here, this
test module) is probed in the host's one round trip and parsed into HostFacts, with nothing else
edited. The round trip runs the real probe script in a local shell (no SSH, no mocks of sparkctl)."""

from __future__ import annotations

import subprocess
import time
from typing import Optional

import pytest
from hostfacts import inventory

from sparkctl.checks import GROUP_READS
from sparkctl.facts import base
from sparkctl.facts.base import Reading, fact, host_fields
from sparkctl.facts.host import HostFacts, background_keys, gather_host, kinds, parse_host, probes_for
from sparkctl.facts.probe import Section

INV = inventory()


class LocalShell:
    """The part of a HostSession the gatherer uses, over a local `sh` (the lab's hosts run the same script)."""

    def __init__(self, name: str):
        self.name = name
        self.runs = 0

    def connect(self):
        return self

    def run(self, command, timeout=None):
        from sparkctl.transport.ssh import CommandResult

        self.runs += 1
        p = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return CommandResult(self.name, " ".join(command), p.returncode, p.stdout, p.stderr, 0.0)


@pytest.fixture
def registered():
    """Facts (and field classes) a test registers are removed when it ends (the registry is the process's)."""
    before, classes = set(base.registry()), list(base.FIELDS)
    yield
    for name in set(base.REGISTRY) - before:
        base.remove(name)
    for cls in [c for c in base.FIELDS if c not in classes]:
        base.forget_fields(cls)


def test_a_fact_defined_in_one_module_is_probed_gathered_and_parsed(registered):
    # the whole definition of a new kind: its typed field (with its default), name, probe, parser, background
    @host_fields
    class BootFields:
        boot_id: Optional[str] = None

    @fact("boot_id", lambda t: "cat /proc/sys/kernel/random/boot_id" if t.host.role == "head" else None, background=True)
    def _boot_id(f, r: Reading) -> None:
        f.boot_id = r.out.strip() if r.ok else None

    assert "boot_id" in kinds()
    assert probes_for(INV, "head", {"boot_id"}) == {"boot_id": "cat /proc/sys/kernel/random/boot_id"}
    assert probes_for(INV, "worker", {"boot_id"}) == {}  # nothing to read there
    assert background_keys(probes_for(INV, "head", {"boot_id", "clock"})) == {"boot_id"}

    shell = LocalShell("head")
    f = gather_host(shell, INV, {"boot_id", "clock", "memlock"})
    expected = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert f.boot_id == expected and shell.runs == 1  # one round trip with the other kinds
    assert abs(f.clock_offset) < 5 and f.memlock_kib is not None and f.kinds == {"boot_id", "clock", "memlock"}
    # a host where it was not read has the fact's default
    assert parse_host(INV, "worker", {}).boot_id is None


def test_a_re_read_keeps_the_other_sections_and_the_clock_of_its_own_round_trip():
    shell = LocalShell("head")
    first = gather_host(shell, INV, {"clock", "memlock"})
    time.sleep(0.05)
    again = gather_host(shell, INV, {"meminfo"}, into=first)
    assert again.kinds == {"clock", "memlock", "meminfo"} and again.memlock_kib == first.memlock_kib
    assert again.meminfo["MemTotal"] > 0 and again.clock_offset == pytest.approx(first.clock_offset)


def test_a_parser_that_meets_odd_output_leaves_the_default_and_says_why(registered):
    @host_fields
    class AnswerFields:
        answer: Optional[int] = None

    @fact("answer", "echo 42")
    def _answer(f, r: Reading) -> None:
        f.answer = int(r.out)

    f = parse_host(INV, "head", {"answer": Section(0, "forty-two")})
    assert f.answer is None and f.errors["answer"].startswith("unreadable output (ValueError")


def test_a_kind_or_a_field_is_owned_once(registered):
    with pytest.raises(ValueError, match="registered twice"):
        fact("clock", "date")(lambda f, r: None)
    with pytest.raises(ValueError, match=r"Ping6Fields: field\(s\) \['pings'\] already belong to \['NetworkFields'\]"):

        @host_fields
        class Ping6Fields:
            pings: int = 0

    with pytest.raises(ValueError, match=r"field\(s\) \['errors'\] already belong to \['HostFacts'\]"):

        @host_fields
        class ErrorsFields:
            errors: Optional[str] = None

    assert [c for c in base.FIELDS if c.__name__ in ("Ping6Fields", "ErrorsFields")] == []  # neither registered
    with pytest.raises(AttributeError, match="'HostFacts' object has no attribute 'nonsense'"):
        HostFacts("head").nonsense  # noqa: B018


def test_a_mutable_default_is_each_hosts_own():
    a, b = HostFacts("head"), HostFacts("worker")
    a.virtual.add("veth0")  # a parser fills a mutable default in place
    assert b.virtual == set() and a.user == b.user == "" and a.image_store == "classic"


def test_every_kind_checks_and_steps_read_is_a_registered_fact():
    from sparkctl.steps.registry import step_classes

    read = set().union(*GROUP_READS.values()) | {k for cls in step_classes().values() for k in cls.facts}
    assert read <= set(kinds()), sorted(read - set(kinds()))
    with pytest.raises(ValueError, match="unknown fact kind"):
        probes_for(INV, "head", {"clocks"})


def test_parsers_run_after_the_facts_they_read(registered):
    @host_fields
    class SumFields:
        total: Optional[int] = None
        part: int = 0

    @fact("total", "echo 3", after=("part",))
    def _total(f, r: Reading) -> None:
        f.total = int(r.out) + f.part  # reads the fact registered below

    @fact("part", "echo 2")
    def _part(f, r: Reading) -> None:
        f.part = int(r.out)

    assert parse_host(INV, "head", {"total": Section(0, "3"), "part": Section(0, "2")}).total == 5
    assert kinds()[0] == "clock"  # first in the script: right after the command is sent


def test_hostfacts_is_declared_from_every_field_class_the_facts_register():
    """mypy reads HostFacts' bases (facts/host.py); the run sets the registered classes' fields:
    a topic's class missing from the bases would be fields mypy cannot see."""
    import ast
    from pathlib import Path

    import sparkctl.facts.host as host_module

    tree = ast.parse(Path(host_module.__file__).read_text())
    bases = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_Fields").bases
    kinds()  # every topic module imported: its class registered
    assert {b.id for b in bases if isinstance(b, ast.Name)} == {c.__name__ for c in base.FIELDS}
