"""The runner with fake steps: gate before the first change, stop on the first failure, skips,
check mode, and order across hosts, as playbook data drives them (no host: the fake steps read
no facts, so the runner has nothing to gather)."""

from __future__ import annotations

import threading
import time

import pytest
from hostfacts import inventory

from sparkctl.errors import HostError, InputError
from sparkctl.runner import Playbook, Stage, build_stages, load_playbook, parse_playbook, run_playbook
from sparkctl.steps.base import Change, RunContext, Step, StepOptions

INV = inventory()
HOSTS = list(INV.hosts)  # head, worker, offload


class NoHosts:
    """The runner's view of the SSH fleet when no step reads facts: every host reached."""

    sessions = {h: None for h in HOSTS}

    def map(self, fn, hosts=None, timeout=None):
        assert not list(hosts or []), "fake steps read no facts: nothing to gather"
        return {}


class Fake(Step):
    """A step that plans `changes` per host and records when and where it applied."""

    def __init__(self, name, changes=None, fail_on=None, block_on=None, log=None, meet=None):
        self.name = name
        self._changes = changes or {}
        self.fail_on, self.block_on, self.log, self.meet = fail_on, block_on, log if log is not None else [], meet

    def plan_host(self, ctx, host):
        if host == self.block_on:
            return self.blocked(host, "blocked by the fake")
        acts = self._changes.get(host, [])
        if not acts:
            return self.noop(host, "nothing to do")
        return self.changes(host, [Change(a, f"{a} on {host}") for a in acts])

    def plan(self, ctx):
        # the runner must offer every reached host (no facts: plan for all)
        return {h: self.plan_host(ctx, h) for h in self.hosts(ctx.inventory)}

    def apply(self, ctx, plan):
        if self.meet:  # every host's apply must be under way at once to pass (one after the other breaks it)
            self.meet.wait(timeout=10)
        self.log.append((self.name, plan.host, threading.current_thread().name, time.monotonic()))
        if plan.host == self.fail_on:
            raise HostError(f"{plan.host}: fake failure")
        return "done"


class Meet:
    """The first apply takes FIRST_S by itself; every later one waits until all the rest are under way."""

    FIRST_S = 0.2

    def __init__(self, rest):
        self.rest, self.calls = rest, 0
        self.lock = threading.Lock()

    def wait(self, timeout):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            time.sleep(self.FIRST_S)
        else:
            self.rest.wait(timeout=timeout)


def run(stages, check=False):
    ctx = RunContext(inventory=INV, fleet=NoHosts(), check_mode=check)
    return run_playbook(ctx, stages, "test")


def stage(step, gate=False, in_order=False, first_alone=False):
    from sparkctl.runner import PlaybookStep

    return Stage(PlaybookStep(step=step.name, gate=gate, in_order=in_order, first_alone=first_alone), step)


def statuses(recap, step):
    return {r.host: r.status for r in recap.results if r.step == step}


def test_a_gate_is_not_run_when_nothing_changes():
    gate = Fake("gate")
    recap = run([stage(gate, gate=True), stage(Fake("a"))])
    assert statuses(recap, "gate") == {h: "skipped" for h in HOSTS}
    assert all(r.message == "not needed: nothing to change" for r in recap.results if r.step == "gate")
    assert not recap.failed


def test_a_gate_runs_just_before_the_first_change_and_a_failing_gate_stops_it():
    log = []
    recap = run([stage(Fake("gate", block_on="worker"), gate=True), stage(Fake("a", {"head": ["x"]}, log=log)), stage(Fake("b"))])
    assert log == []  # nothing applied
    assert statuses(recap, "gate")["worker"] == "failed" and recap.stopped_at == "gate"
    assert statuses(recap, "a") == statuses(recap, "b") == {h: "skipped" for h in HOSTS}


def test_the_first_failed_step_stops_the_run_and_later_steps_say_why():
    log = []
    recap = run(
        [stage(Fake("a", {h: ["x"] for h in HOSTS}, fail_on="worker", log=log)), stage(Fake("b", {"head": ["y"]}, log=log))]
    )
    assert statuses(recap, "a") == {"head": "changed", "worker": "failed", "offload": "changed"}
    assert statuses(recap, "b") == {h: "skipped" for h in HOSTS}
    assert {s for s, *_ in log} == {"a"}
    assert "not run: step 'a' failed" in [r.message for r in recap.results if r.step == "b"]


def test_a_blocked_plan_fails_before_any_host_is_touched():
    log = []
    recap = run([stage(Fake("a", {h: ["x"] for h in HOSTS}, block_on="offload", log=log))])
    assert log == [] and statuses(recap, "a") == {"head": "skipped", "worker": "skipped", "offload": "failed"}


def test_check_mode_lists_the_operations_and_applies_nothing():
    log = []
    recap = run([stage(Fake("a", {"worker": ["set-mtu", "persist"]}, log=log))], check=True)
    assert log == []
    (r,) = [r for r in recap.results if r.host == "worker"]
    assert r.status == "changed" and r.operations == ["set-mtu", "persist"] and r.message.startswith("would: ")
    assert recap.to_dict()["plans"][1]["operations"] == [
        {"action": "set-mtu", "summary": "set-mtu on worker"}, {"action": "persist", "summary": "persist on worker"},
    ]  # fmt: skip


def test_in_order_applies_host_after_host_and_stops_at_the_first_failure():
    log = []
    recap = run([stage(Fake("a", {h: ["x"] for h in HOSTS}, fail_on="worker", log=log), in_order=True)])
    assert [h for _, h, *_ in log] == ["head", "worker"]
    assert statuses(recap, "a")["offload"] == "skipped"


def test_without_in_order_hosts_apply_at_once():
    log = []
    recap = run([stage(Fake("a", {h: ["x"] for h in HOSTS}, log=log, meet=threading.Barrier(len(HOSTS))))])
    assert set(statuses(recap, "a").values()) == {"changed"}, recap.to_dict()["results"]
    assert len({t for *_, t, _ in log}) == 3  # three threads


def test_first_alone_applies_the_first_host_then_the_others_at_once():
    # the weights: the download host first, then every other node copies from it at the same time
    log = []
    meet = Meet(threading.Barrier(len(HOSTS) - 1))
    started = time.monotonic()
    recap = run([stage(Fake("a", {h: ["x"] for h in HOSTS}, log=log, meet=meet), first_alone=True)])
    assert set(statuses(recap, "a").values()) == {"changed"}, recap.to_dict()["results"]
    assert log[0][1] == HOSTS[0] and {h for _, h, *_ in log[1:]} == set(HOSTS[1:])
    # the others began once the first had ended (they met each other under way, on threads of their own)
    assert all(t - started >= Meet.FIRST_S for *_, t in log[1:])
    assert len({name for _, _, name, _ in log[1:]}) == len(HOSTS) - 1


def test_first_alone_stops_when_the_first_host_fails():
    log = []
    recap = run([stage(Fake("a", {h: ["x"] for h in HOSTS}, fail_on=HOSTS[0], log=log), first_alone=True)])
    assert [h for _, h, *_ in log] == [HOSTS[0]]
    assert statuses(recap, "a") == {HOSTS[0]: "failed", **{h: "skipped" for h in HOSTS[1:]}}


def test_the_shipped_playbooks_are_data_the_runner_understands():
    up = load_playbook("up")
    assert [s.step for s in up.steps] == [
        "preflight",
        "fabric",
        "images",
        "weights",
        "caches",
        "engram",
        "stop",
        "gateway",
        "runtime",
        "throughput",
        "record",
        "keeper",
    ]
    # the keeper's own recoveries run the reload playbook: it never restarts the keeper under itself
    assert [s.step for s in load_playbook("reload").steps] == [s.step for s in up.steps][:-1]
    assert [s.step for s in up.steps if s.gate] == ["preflight"]
    assert {s.step for s in up.steps if s.in_order} == {"stop", "runtime", "keeper"}
    assert {s.step for s in up.steps if s.first_alone} == {"weights"}  # downloaded once, then copied to all at once
    down = build_stages(load_playbook("down"))
    assert [(s.name, s.spec.in_order, s.step.options) for s in down] == [
        ("keeper", True, StepOptions(remove=True)),  # first: nothing may bring back what down stops
        ("stop", True, StepOptions(always=True)),
        ("gateway", False, StepOptions(remove=True)),  # last, after the engine it fronts
    ]


def test_an_unknown_playbook_or_step_is_bad_input():
    with pytest.raises(InputError, match="no playbook 'nope'"):
        load_playbook("nope")
    with pytest.raises(InputError, match="unknown step"):
        build_stages(Playbook(name="x", steps=[{"step": "fabrik"}]))


def test_an_entry_with_in_order_and_first_alone_is_refused_naming_it():
    """Both orders on one entry: the runner could honour one only, so the playbook is refused,
    naming the entry and its step, instead of in_order silently winning."""
    text = """
name: up
steps:
  - step: fabric
  - step: weights
    in_order: true
    first_alone: true
"""
    with pytest.raises(
        InputError, match=r"playbook 'up' is malformed: steps\[1\] \(step weights\): in_order and first_alone exclude each other"
    ):
        parse_playbook("up", text)
    assert [s.first_alone for s in parse_playbook("up", text.replace("    in_order: true\n", "")).steps] == [False, True]


class WorkerUnreachable(NoHosts):
    """A fleet whose worker never answered the facts round trip (as a refused host key would)."""

    def map(self, fn, hosts=None, timeout=None):
        from sparkctl.transport.ssh import Outcome

        return {h: Outcome(h, error="worker: host key refused", fix="ssh-keygen -R worker") if h == "worker"
                else Outcome(h, value=None) for h in hosts}  # fmt: skip


class Reads(Fake):
    facts = frozenset({"clock"})


def test_a_host_that_cannot_be_reached_fails_connect_and_nothing_runs():
    log = []
    ctx = RunContext(inventory=INV, fleet=WorkerUnreachable())
    recap = run_playbook(ctx, [stage(Reads("a", {h: ["x"] for h in HOSTS}, log=log))], "test")
    assert log == [] and recap.stopped_at == "connect" and recap.steps[0] == "connect"
    assert statuses(recap, "connect") == {"worker": "failed"}
    assert [r.fix for r in recap.results if r.step == "connect"] == ["ssh-keygen -R worker"]
    assert statuses(recap, "a") == {"head": "skipped", "offload": "skipped"}


class HeadLock(NoHosts):
    """A fleet whose head reports the cluster lock's holder (None: free) in the facts round trip."""

    def __init__(self, holder=None):
        self.holder, self.asked = holder, []

    def map(self, fn, hosts=None, timeout=None):
        from types import SimpleNamespace

        from sparkctl.transport.ssh import Outcome

        self.asked.append(list(hosts or []))
        return {h: Outcome(h, value=SimpleNamespace(lock=self.holder, errors={})) for h in hosts or []}


class LazyLock:
    """The lock as the runner sees it: taken on demand (`take` raises like a refused lock would)."""

    def __init__(self, refuse=None):
        self.held, self.taken, self.refuse = False, 0, refuse

    def take(self):
        if self.refuse:
            raise self.refuse
        self.held, self.taken = True, self.taken + 1


def run_lazy(stages, fleet, lock):
    shown = []
    ctx = RunContext(inventory=INV, fleet=fleet, lock=lock)
    return run_playbook(ctx, stages, "test", on_result=shown.append), shown


def test_a_run_with_nothing_to_change_reads_the_lock_and_never_takes_it():
    fleet, lock = HeadLock(), LazyLock()
    recap, shown = run_lazy([stage(Fake("a"))], fleet, lock)
    assert lock.taken == 0 and fleet.asked == [["head"]]  # the lock read in the head's one round trip
    assert not recap.failed and shown == recap.results and len(shown) == len(HOSTS)


def test_a_planned_change_takes_the_lock_then_plans_again_from_fresh_facts_and_applies_once():
    log = []
    fleet, lock = HeadLock(), LazyLock()
    recap, shown = run_lazy([stage(Reads("a", {"worker": ["x"]}, log=log))], fleet, lock)
    assert lock.taken == 1 and fleet.asked == [HOSTS, HOSTS]  # every host read again once the lock is held
    assert [(s, h) for s, h, *_ in log] == [("a", "worker")]  # applied once, under the lock
    assert statuses(recap, "a")["worker"] == "changed" and shown == recap.results


def test_a_lock_held_by_another_run_is_taken_or_refused_before_anything_is_planned():
    from sparkctl.lock import LockHeld

    log = []
    fleet, lock = HeadLock(holder="someone"), LazyLock(refuse=LockHeld("cluster lab is locked by someone"))
    with pytest.raises(LockHeld, match="locked by someone"):
        run_lazy([stage(Fake("a"))], fleet, lock)  # nothing to change, but another run holds the cluster
    assert log == [] and lock.taken == 0


def test_an_option_no_step_reads_is_refused_naming_the_entry_and_the_option():
    """A misspelt option (`remvoe: true`) is an error when the playbook is read, not a `down` that
    quietly leaves the gateway in place; the options a step reads reach it typed."""
    text = """
name: down
steps:
  - step: gateway
    options:
      remvoe: true
"""
    with pytest.raises(
        InputError,
        match=r"playbook 'down' is malformed: steps\[0\] \(step gateway\)\.options\.remvoe: unknown; expected one of: remove, always, side_load, pull",
    ):
        parse_playbook("down", text)
    entry = parse_playbook("down", text.replace("remvoe", "remove")).steps[0]
    assert entry.options.remove and not entry.options.always
