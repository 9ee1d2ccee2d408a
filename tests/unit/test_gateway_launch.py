"""The gateway in front of the engine: its launch (rendered from the inventory alone), its restart
group, the step's plans from recorded `docker inspect` output, its inventory rules, and the code
sparkctl ships for it (which must run with nothing else of sparkctl beside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostfacts import host_facts, inventory, sec
from test_checks_state import lock_text

from sparkctl.inventory.models import Inventory
from sparkctl.inventory.validate import check_inventory
from sparkctl.launch import gateway_code
from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.launch.plan import render
from sparkctl.steps.base import RunContext, StepOptions
from sparkctl.steps.gateway import GatewayStep

INV = inventory()


def changed(inv: Inventory, **sections) -> Inventory:
    data = inv.model_dump(mode="json", exclude_none=True)
    for path, value in sections.items():
        *parents, key = path.split("__")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[key] = value
    return Inventory.model_validate(data)


def head_serve_line(plan) -> str:
    return next(c for c in plan.containers if c.role == "head").command[-1]


def test_the_gateway_takes_the_public_port_and_the_engine_moves_behind_it():
    plan = render(INV)
    gw = plan.gateway
    assert gw is not None and gw.host == "head" and gw.name == "sparkctl-gateway"
    assert plan.all_containers[0] is gw  # started before the engine
    cmd = gw.command
    assert cmd[:3] == ["python3", "-m", "sparkctl.gateway"]
    assert cmd[cmd.index("--listen") + 1] == f"0.0.0.0:{INV.runtime.port}"
    assert cmd[cmd.index("--upstream") + 1] == f"http://127.0.0.1:{INV.gateway.engine_port}"
    assert f"--port {INV.gateway.engine_port} " in head_serve_line(plan)
    assert gw.gpus == "none" and not gw.devices and "--gpus" not in gw.docker_run()
    assert gw.image == INV.runtime.image  # an image the head already holds
    code = next(m for m in gw.mounts if m.target == "/opt/sparkctl-gateway")
    assert code.read_only and code.source.endswith("/" + gateway_code.code_hash())


def test_disabled_the_engine_serves_the_public_port_itself():
    off = changed(INV, gateway__enabled=False)
    plan = render(off)
    assert plan.gateway is None and [c.role for c in plan.all_containers] == [c.role for c in plan.containers]
    assert f"--port {off.runtime.port} " in head_serve_line(plan)


def test_an_engine_change_never_restarts_the_gateway_and_a_gateway_change_never_the_engine():
    base = render(INV).group_hashes
    engine = render(changed(INV, runtime__max_num_seqs=INV.runtime.max_num_seqs + 1)).group_hashes
    assert engine["gateway"] == base["gateway"] and engine["engine"] != base["engine"]
    gw = render(changed(INV, gateway__hold_s=5)).group_hashes
    assert gw["engine"] == base["engine"] and gw["drafter"] == base["drafter"] and gw["gateway"] != base["gateway"]
    lc = render(changed(INV, gateway__long_context={"tokens": 32768, "max_concurrent": 1})).gateway.command
    assert lc[lc.index("--long-context-tokens") + 1] == "32768"


@pytest.mark.parametrize(
    ("sections", "field", "says"),
    [
        ({"gateway__engine_port": 8888}, ("gateway", "engine_port"), "already runtime.port"),
        ({"gateway__engine_port": 6379}, ("gateway", "engine_port"), "Ray's GCS port"),
        ({"gateway__hold_s": 60, "gateway__hold_max_s": 30}, ("gateway", "hold_max_s"), "below hold_s"),
    ],
)
def test_a_colliding_port_or_a_short_hold_is_named(sections, field, says):
    problems = [p for p in check_inventory(changed(INV, **sections)) if p.path == field]
    assert problems and says in problems[0].message, [p.message for p in check_inventory(changed(INV, **sections))]
    assert not [p for p in check_inventory(changed(INV, gateway__enabled=False, gateway__engine_port=8888)) if p.path == field]


def test_an_unknown_gateway_key_is_refused():
    with pytest.raises(ValueError, match="hold_seconds"):
        changed(INV, gateway__hold_seconds=5)


# the step, from recorded `docker inspect` of the head


def gateway_container(config_hash: str, state: str = "running") -> dict:
    return {
        "Id": "gw-ctr", "Name": "/sparkctl-gateway", "Image": "sha256:" + "1" * 64,
        "State": {"Status": state, "ExitCode": 0, "StartedAt": "2026-12-01T00:00:00.000000000Z"},
        "Config": {"Image": INV.runtime.image, "Labels": {f"{LABEL_PREFIX}.cluster": "lab", f"{LABEL_PREFIX}.role": "gateway",
                                                          f"{LABEL_PREFIX}.config-hash": config_hash}},
        "HostConfig": {},
    }  # fmt: skip


def plan(inv: Inventory, running: list[dict], code: str = "present\n", **options):
    f = {"head": host_facts(inv, "head", containers=sec(json.dumps(running)), gateway_code=sec(code))}
    step = GatewayStep()
    step.options = StepOptions(**options)
    return step.plan(RunContext(inventory=inv, fleet=None, facts=f))["head"]


def test_the_step_ships_the_code_starts_and_waits_then_is_a_noop():
    want = render(INV).expected_hash("sparkctl-gateway")
    first = plan(INV, [], code="absent\n")
    assert [c.action for c in first.changes] == ["ship-code", "start", "wait"]
    assert "sparkctl-gateway not on head" in first.reason
    again = plan(INV, [gateway_container(want)])
    assert again.empty and f"sparkctl-gateway running config {want} on :{INV.runtime.port}" in again.reason
    stale = plan(INV, [gateway_container("0ld")])
    assert [c.action for c in stale.changes] == ["start", "wait"] and "runs config 0ld" in stale.reason
    dead = plan(INV, [gateway_container(want, state="exited")])
    assert [c.action for c in dead.changes] == ["start", "wait"] and "is exited" in dead.reason


def test_down_removes_it_and_disabling_removes_it():
    want = render(INV).expected_hash("sparkctl-gateway")
    down = plan(INV, [gateway_container(want)], remove=True)
    assert [c.action for c in down.changes] == ["remove"] and "after the engine it fronts" in down.changes[0].summary
    assert plan(INV, [], remove=True).empty
    off = plan(changed(INV, gateway__enabled=False), [gateway_container(want)])
    assert [c.action for c in off.changes] == ["remove"] and "gateway.enabled is false" in off.changes[0].summary
    assert plan(changed(INV, gateway__enabled=False), []).empty


def test_the_engine_steps_leave_the_gateway_container_alone():
    from test_step_plans import WANT, facts

    from sparkctl.steps.runtime import RuntimeStep, StopStep

    f = facts(hashes=WANT)
    head = f["head"]
    head.containers.append(host_facts(INV, "head", containers=sec(json.dumps([gateway_container("x")]))).containers[0])
    c = RunContext(inventory=INV, fleet=None, facts=f)
    assert all(p.empty for p in StopStep().plan(c).values())
    assert all(p.empty for p in RuntimeStep().plan(c).values())


# the code sparkctl ships


def test_the_shipped_code_runs_with_nothing_else_of_sparkctl(tmp_path):
    for rel, data in gateway_code.files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    probe = (
        "import sparkctl, sparkctl.gateway.server, sparkctl.gateway.ctl, sys;"
        f"assert sparkctl.__file__.startswith({str(tmp_path)!r}), sparkctl.__file__;"
        "print(sorted(m for m in sys.modules if m.startswith('sparkctl')))"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # the gateway, the names it shares with its launch and the stream watch, nothing else of sparkctl
    assert all(
        m in ("sparkctl", "sparkctl.launch", "sparkctl.launch.gateway", "sparkctl.sse") or m.startswith("sparkctl.gateway")
        for m in eval(r.stdout)
    )
    r = subprocess.run(
        [sys.executable, "-m", "sparkctl.gateway", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and "--upstream" in r.stdout


# a hold left behind: a change killed between the gateway's hold and the engine's stop


RECORDED = Path(__file__).parent / "recorded" / "gateway"


def hold_lines(page: str) -> str:
    """What the `gateway_hold` probe keeps of a metrics page (its own filter, run by sh)."""
    from sparkctl.facts.runtime import HOLD_LINES

    text = (RECORDED / page).read_text() if page else ""
    return subprocess.run(["sh", "-c", HOLD_LINES], input=text, capture_output=True, text=True, check=True).stdout


def runtime_plans(gateway_hold: str, hashes=None, lock: str | None = None):
    from test_step_plans import WANT, facts

    from sparkctl.steps.runtime import RuntimeStep

    head = {"gateway_hold": sec(gateway_hold), **({"lock": sec(lock)} if lock is not None else {})}
    f = facts(hashes=hashes or WANT, head=head)
    return RuntimeStep().plan(RunContext(inventory=INV, fleet=None, facts=f))


def test_the_gateways_hold_is_read_from_its_own_metrics_lines():
    from sparkctl.facts.gateway import AdminHold, admin_hold

    held = hold_lines("holding.txt")
    assert len(held.splitlines()) == 4  # holding (admin, upstream_down), hold_age_seconds, hold_info
    assert admin_hold(held) == AdminHold(reason="reload", held_for_s=0.0)
    assert admin_hold(hold_lines("passing.txt")) is None
    assert admin_hold(hold_lines("")) is None  # nothing listens on runtime.port: no hold known


def test_a_hold_no_change_owns_is_released_when_nothing_restarts_the_engine():
    held = hold_lines("holding.txt")
    plans = runtime_plans(held)
    assert [c.action for c in plans["head"].changes] == ["release"]
    assert "release the gateway's reload hold" in plans["head"].reason and "did not finish" in plans["head"].reason
    assert plans["worker"].empty and plans["offload"].empty
    # the lock of a run that is gone (no heartbeat for a minute) owns nothing
    gone = runtime_plans(held, lock=lock_text(60, host="control-host"))
    assert [c.action for c in gone["head"].changes] == ["release"]
    # nothing to release: a passing gateway, or the hold of a change still running (its lock is live)
    assert runtime_plans(hold_lines("passing.txt"))["head"].empty
    assert runtime_plans(held, lock=lock_text(2, host="control-host"))["head"].empty
    # a head that restarts releases the gateway once it serves (wait-serving), no second release
    from test_step_plans import WANT

    stale = runtime_plans(held, hashes={**WANT, "head": "0ld"})
    assert [c.action for c in stale["head"].changes] == ["start", "wait-serving"]
