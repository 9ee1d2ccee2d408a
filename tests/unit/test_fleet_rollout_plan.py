"""The fleet rollout's plan without a host: the members' order, each member's own reload plan (warm
or cold, the expected start from that member's history), members left as they are, and a bad
--config-dir refused (exit 2, naming the file and field) before any host is touched.

A two-member fleet of real inventories (inventories/lab.yaml and the lab's second pair); each
member's plan is sparkctl.reload.plan_reload over the steps' check-mode plans of recorded
container output (the way test_reload_plan.py builds one), so the assembly under test is the one
`fleet reload --check` prints."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from climain import run
from test_fleet_model import LAB, second_pair
from test_reload_plan import checked, recorded

from sparkctl.errors import InputError
from sparkctl.fleet.model import load_fleet
from sparkctl.fleet.rollout import RolloutRefused, drain_refusal, plan_rollout, read_config_dir, run_rollout
from sparkctl.inventory.models import Inventory
from sparkctl.records import Event
from sparkctl.reload import ReloadReport, plan_reload, restore_secrets
from sparkctl.runtime.compile_cache import compile_key

REPO = Path(__file__).resolve().parents[2]


def with_runtime(doc: dict, **fields) -> dict:
    d = copy.deepcopy(doc)
    d["runtime"].update(fields)
    return d


FLEET = {
    "fleet": {"name": "lab-fleet"},
    "members": [{"inventory": "inventory.yaml"}, {"inventory": "inventory-2.yaml"}],
    "front_door": {"member": "lab", "port": 8890},
}
# each member's own history: warm starts of ~2 s on lab, ~3 s on lab-2; cold ones of 6 s and 9 s
EVENTS = {
    "lab": [{"cache": "warm", "start_seconds": s, "outcome": "ok"} for s in (1.7, 2.0, 2.4)]
    + [{"cache": "cold", "start_seconds": 6.4, "outcome": "ok"}],
    "lab-2": [{"cache": "warm", "start_seconds": 3.0, "outcome": "ok"}, {"cache": "cold", "start_seconds": 9.0}],
}


def PASSING(fleet):
    """The front door's state as plan_rollout reads it: here, every member passing."""
    return {m.name: "passing" for m in fleet.members}, None


@pytest.fixture
def fleet(tmp_path):
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(LAB))
    (tmp_path / "inventory-2.yaml").write_text(yaml.safe_dump(second_pair(LAB)))
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET, sort_keys=False))
    return load_fleet(tmp_path / "fleet.yaml")


def recorded_check(running: dict[str, dict] | None = None, notes: dict[str, str] | None = None):
    """A member's check from recorded facts: its head records `running[name]` (default: its
    inventory file) and its containers run it; its own history is EVENTS[name]."""

    def check(kind, member, new, to):
        rec = recorded(Inventory.model_validate((running or {}).get(member.name) or member.inventory.model_dump(mode="json")))
        if kind in ("restart", "rollback"):
            new = restore_secrets(rec.inventory, member.inventory)
        base = Inventory.model_validate(rec.inventory)
        events = [Event.model_validate(e) for e in EVENTS[member.name]]
        p = plan_reload(kind, rec, new, events, True, checked(new, base, force=kind == "restart"))
        return ReloadReport(p, notes=[notes[member.name]] if notes and member.name in notes else [])

    return check


def config_dir(tmp_path, **docs: dict) -> Path:
    d = tmp_path / "new"
    d.mkdir(exist_ok=True)
    for name, doc in docs.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_members_roll_in_the_fleet_files_order_each_with_its_own_warm_or_cold_and_expected_time(fleet, tmp_path):
    d = config_dir(
        tmp_path,
        lab=with_runtime(LAB, env={**LAB["runtime"]["env"], "FLEET_TAG": "2"}),  # outside the compile hash
        **{"lab-2": with_runtime(second_pair(LAB), max_num_seqs=2)},  # a compile input: cold
    )
    p = plan_rollout(fleet, "reload", d, door=PASSING, check=recorded_check())
    assert [m.member for m in p.changing] == ["lab", "lab-2"]
    lab, lab2 = p.members
    assert lab.plan.prediction == "warm" and lab.plan.containers[-2:] == ["sparkctl-worker", "sparkctl-head"]
    assert [c.path for c in lab.plan.changes] == ["runtime.env.FLEET_TAG"]
    assert lab2.plan.prediction == "cold" and lab2.plan.compile_changed == ["runtime.max_num_seqs"]
    # the same figure each member's own `sparkctl reload --check` shows: the median of its own starts
    assert (lab.expected_seconds, lab2.expected_seconds) == (2.0, 9.0) and p.expected_seconds == 11.0
    text = "\n".join(p.lines())
    assert "1. lab (inventory.yaml -> " in text and "lab.yaml): warm, expected ~2 s to serve" in text
    assert "2. lab-2 (inventory-2.yaml -> " in text and "cold, expected ~9 s to serve" in text
    assert "compile inputs changed: runtime.max_num_seqs" in text and "one at a time" in text
    doc = p.to_dict()
    assert doc["order"] == ["lab", "lab-2"] and doc["expected_start_seconds"] == 11.0
    assert [m["prediction"] for m in doc["members"]] == ["warm", "cold"] and doc["blocked"] == []


def test_the_order_is_the_fleet_files_not_the_config_dirs(fleet, tmp_path):
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump({**FLEET, "members": FLEET["members"][::-1]}, sort_keys=False))
    reversed_fleet = load_fleet(tmp_path / "fleet.yaml")
    d = config_dir(tmp_path, lab=with_runtime(LAB, max_num_seqs=2), **{"lab-2": with_runtime(second_pair(LAB), max_num_seqs=2)})
    assert [m.member for m in plan_rollout(reversed_fleet, "reload", d, door=PASSING, check=recorded_check()).changing] == [
        "lab-2",
        "lab",
    ]


def test_a_member_without_a_file_or_whose_file_renders_what_it_runs_is_left_as_it_is(fleet, tmp_path):
    d = config_dir(tmp_path, lab=LAB)  # lab's file: the config it already runs; no lab-2.yaml
    p = plan_rollout(fleet, "reload", d, door=PASSING, check=recorded_check())
    assert p.changing == [] and [m.action for m in p.members] == ["unchanged", "unchanged"]
    assert p.members[0].reason == "nothing to do: the new config renders the recorded one"
    assert p.members[1].reason == f"no lab-2.yaml in {d}"
    assert p.members[1].config == recorded(fleet.member("lab-2").inventory).config_hash  # what it runs, named
    assert f"-  lab-2: unchanged (no lab-2.yaml in {d}); runs config " in "\n".join(p.lines())
    # lab-2 runs another config than its inventory file (an earlier rollout): the plan says so
    p = plan_rollout(
        fleet, "reload", d, door=PASSING, check=recorded_check({"lab-2": with_runtime(second_pair(LAB), max_num_seqs=2)})
    )
    assert "(its inventory file inventory-2.yaml differs from the config it runs)" in p.members[1].reason


def test_restart_takes_every_member_and_member_picks_one(fleet):
    p = plan_rollout(fleet, "restart", door=PASSING, check=recorded_check())
    assert [m.member for m in p.changing] == ["lab", "lab-2"]
    assert p.members[0].plan.groups == ["drafter", "engine"] and p.members[1].plan.groups == ["engine"]
    assert [m.plan.prediction for m in p.changing] == ["warm", "warm"] and p.expected_seconds == 5.0
    only = plan_rollout(fleet, "rollback", only="lab-2", door=PASSING, check=recorded_check())
    assert [(m.member, m.action, m.reason) for m in only.members][0] == ("lab", "unchanged", "--member lab-2")
    with pytest.raises(InputError, match="no member 'lab-3'"):
        plan_rollout(fleet, "restart", only="lab-3", door=PASSING, check=recorded_check())


def test_a_member_with_an_interrupted_reload_blocks_the_run_before_anything_is_drained(fleet):
    note = "an interrupted reload (config a -> b, started 2026-12-01T00:00:00Z by root@vm, stopped in phase 'drain')"
    p = plan_rollout(fleet, "restart", door=PASSING, check=recorded_check(notes={"lab-2": note}))
    assert p.blocked == [f"lab-2: {note}: `sparkctl fleet rollback --member lab-2` first"]
    assert "the run would not start: lab-2: an interrupted reload" in "\n".join(p.lines())
    with pytest.raises(RolloutRefused, match="the rollout would not start"):
        run_rollout(fleet, p)
    # a rollback is the way out: it finishes the interrupted one (not blocked)
    assert plan_rollout(fleet, "rollback", door=PASSING, check=recorded_check(notes={"lab-2": note})).blocked == []


def _refused(fleet, d: Path) -> str:
    with pytest.raises(InputError) as err:
        read_config_dir(fleet, d)
    assert err.value.exit_code == 2
    return err.value.message


def test_a_bad_config_dir_is_refused_naming_the_file_and_field(fleet, tmp_path):
    bad = with_runtime(LAB, max_num_seqs=0)
    stray = second_pair(LAB)
    stray["cluster"]["name"] = "lab-3"
    d = config_dir(tmp_path, lab=bad, **{"lab-3": stray})
    (d / "README.md").write_text("notes: not a member's file\n")
    msg = _refused(fleet, d)
    assert "cannot be rolled out (2 problems)" in msg
    assert f"{d}/lab.yaml:" in msg and "runtime.max_num_seqs" in msg
    assert f"{d}/lab-3.yaml: names no member of fleet lab-fleet (members: lab, lab-2)" in msg


def test_a_member_file_of_another_cluster_or_shape_is_refused(fleet, tmp_path):
    moved = second_pair(LAB)
    moved["hosts"]["worker"]["ssh"]["address"] = "10.231.0.99"
    d = config_dir(tmp_path, lab=second_pair(LAB), **{"lab-2": moved})
    msg = _refused(fleet, d)
    assert f"{d}/lab.yaml: cluster.name: 'lab-2', the file is member lab's" in msg
    assert f"{d}/lab-2.yaml: the new config is not the same cluster: hosts.worker.ssh differs" in msg


def test_an_empty_or_missing_config_dir_is_refused(fleet, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no member's file" in _refused(fleet, empty)
    assert "is not a directory" in _refused(fleet, tmp_path / "nope")
    (empty / "lab.yml").write_text(yaml.safe_dump(LAB))
    assert "rename it lab.yaml" in _refused(fleet, empty)


def test_the_cli_refuses_a_bad_config_dir_with_exit_2_before_any_host(fleet, tmp_path, capsys):
    d = config_dir(tmp_path, **{"lab-9": LAB})
    code, out, err = run(["fleet", "reload", "-f", str(fleet.path), "--config-dir", str(d), "--check"], capsys)
    assert code == 2 and out == ""
    assert "lab-9.yaml: names no member of fleet lab-fleet" in err and "fix:" in err
    code, out, _ = run(["fleet", "reload", "-f", str(fleet.path), "--config-dir", str(d), "--json"], capsys)
    assert code == 2 and "names no member" in out and out.count("\n{") == 0


def test_the_compile_key_of_a_warm_member_is_one_it_served():
    # the warm/cold figures above rest on this: env outside VLLM_* is not a compile input
    a = LAB
    b = with_runtime(LAB, env={**LAB["runtime"]["env"], "FLEET_TAG": "2"})
    assert compile_key(Inventory.model_validate(a).model_dump(mode="json")) == compile_key(
        Inventory.model_validate(b).model_dump(mode="json")
    )


def test_a_member_left_drained_with_nothing_to_change_is_put_back(fleet):
    def lab2_drained(f):  # the door's state after a run killed during lab-2's change
        return {"lab": "passing", "lab-2": "drained"}, None

    p = plan_rollout(fleet, "rollback", door=lab2_drained, check=recorded_check())
    assert [(m.member, m.action) for m in p.members] == [("lab", "unchanged"), ("lab-2", "undrain")]
    assert "lab-2: nothing to change; drained at the front door: put back" in "\n".join(p.lines())


def test_the_last_member_that_serves_is_never_drained_nor_more_than_max_unavailable():
    three = ["a", "b", "c"]
    assert drain_refusal(three, "a", {"a": "passing", "b": "passing", "c": "passing"}, 1) is None
    assert drain_refusal(three, "a", {"a": "failing", "b": "passing", "c": "passing"}, 1) is None  # it is out already
    one_out = drain_refusal(three, "a", {"a": "passing", "b": "passing", "c": "failing"}, 1)
    assert one_out.startswith("not drained: c (failing) is already out of the front door (rollout.max_unavailable 1)")
    assert drain_refusal(three, "a", {"a": "passing", "b": "passing", "c": "failing"}, 2) is None
    last = drain_refusal(["a", "b"], "a", {"a": "passing", "b": "drained"}, 2)
    assert last == "not drained: it is the last member that serves at the front door; the others: b drained"
    assert "unknown" in drain_refusal(["a", "b"], "a", {"a": "passing"}, 1)  # a member the door does not know
