"""A fact is one registered object (facts/base.py): a new kind defined in one module (here, this
test module) is probed in the host's one round trip and parsed into HostFacts, with nothing else
edited. The round trip runs the real probe script in a local shell (no SSH, no mocks of sparkctl)."""

from __future__ import annotations

import subprocess
import time

import pytest
from hostfacts import inventory

from sparkctl.checks import GROUP_READS
from sparkctl.facts import base
from sparkctl.facts.base import Reading, fact
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
    """Facts a test registers are removed when it ends (the registry is the process's)."""
    before = set(base.registry())
    yield
    for name in set(base.REGISTRY) - before:
        base.remove(name)


def test_a_fact_defined_in_one_module_is_probed_gathered_and_parsed(registered):
    # the whole definition of a new kind: name, probe, parser, fields, background
    @fact("boot_id", lambda t: "cat /proc/sys/kernel/random/boot_id" if t.host.role == "head" else None,
          background=True, fields={"boot_id": None})  # fmt: skip
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
    @fact("answer", "echo 42", fields={"answer": None})
    def _answer(f, r: Reading) -> None:
        f.answer = int(r.out)

    f = parse_host(INV, "head", {"answer": Section(0, "forty-two")})
    assert f.answer is None and f.errors["answer"].startswith("unreadable output (ValueError")


def test_a_kind_or_a_field_is_owned_once(registered):
    with pytest.raises(ValueError, match="registered twice"):
        fact("clock", "date")(lambda f, r: None)
    with pytest.raises(ValueError, match=r"field\(s\) \['pings'\] already belong to \['ping'\]"):
        fact("ping6", "true", fields={"pings": dict})(lambda f, r: None)
    with pytest.raises(AttributeError, match="no fact field 'nonsense'"):
        HostFacts("head").nonsense  # noqa: B018


def test_every_kind_checks_and_steps_read_is_a_registered_fact():
    from sparkctl.steps.registry import step_classes

    read = set().union(*GROUP_READS.values()) | {k for cls in step_classes().values() for k in cls.facts}
    assert read <= set(kinds()), sorted(read - set(kinds()))
    with pytest.raises(ValueError, match="unknown fact kind"):
        probes_for(INV, "head", {"clocks"})


def test_parsers_run_after_the_facts_they_read(registered):
    @fact("total", "echo 3", after=("part",), fields={"total": None})
    def _total(f, r: Reading) -> None:
        f.total = int(r.out) + f.part  # reads the fact registered below

    @fact("part", "echo 2", fields={"part": 0})
    def _part(f, r: Reading) -> None:
        f.part = int(r.out)

    assert parse_host(INV, "head", {"total": Section(0, "3"), "part": Section(0, "2")}).total == 5
    assert kinds()[0] == "clock"  # first in the script: right after the command is sent
