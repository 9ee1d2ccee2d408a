"""reload's plan without a host: field diff, the restart set read from the steps' own check-mode
plans (recorded container output in, as the runner parses it), warm/cold, same-cluster check,
secrets restored from the current inventory, drain counts from vLLM's /metrics pages."""

from __future__ import annotations

import json

import pytest
from hostfacts import host_facts, inventory, sec

from sparkctl.errors import InputError
from sparkctl.facts.metrics import parse_page
from sparkctl.inventory.models import Inventory
from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.launch.plan import render
from sparkctl.records import AppliedRecord, Event, dump
from sparkctl.reload import Journal, diff_inventories, plan_reload, reload_stages, restore_secrets, same_cluster
from sparkctl.runner import Recap
from sparkctl.steps.base import RunContext, RunOptions
from sparkctl.steps.record import record_document
from sparkctl.steps.runtime import RuntimeStep, StopStep, drain_counts

INV = inventory()
ID1 = "sha256:" + "1" * 64
ID2 = "sha256:" + "2" * 64


def changed(**runtime) -> Inventory:
    d = INV.model_dump(mode="json")
    for k, v in runtime.items():
        node = d["runtime"]
        *path, last = k.split("__")
        for p in path:
            node = node[p]
        node[last] = v
    return Inventory.model_validate(d)


def recorded(inv: Inventory = INV) -> AppliedRecord:
    """applied.json as the record step writes it for `inv`."""
    ctx = RunContext(inventory=inv, fleet=None)
    return record_document(ctx)


def container_json(spec, config_hash: str, image_id: str = ID1) -> dict:
    """One container as `docker inspect` shows it (the `containers` fact's input)."""
    return {
        "Id": f"{spec.host}-ctr", "Name": f"/{spec.name}", "Image": image_id,
        "State": {"Status": "running", "ExitCode": 0, "StartedAt": "2026-12-01T00:00:00.000000000Z"},
        "Config": {"Image": spec.image, "Labels": {f"{LABEL_PREFIX}.cluster": "lab", f"{LABEL_PREFIX}.role": spec.role,
                                                   f"{LABEL_PREFIX}.config-hash": config_hash}},
        "HostConfig": {},
    }  # fmt: skip


def cluster_facts(new: Inventory, running: Inventory | None, held: str = ID1, gone: tuple[str, ...] = ()) -> dict:
    """Each host's facts: its containers run `running`'s config on image ID1 (none on the `gone`
    hosts), it holds `held` under the tag, and the head answers /health."""
    old = render(running) if running is not None else None
    out = {}
    for host in new.hosts:
        found = [container_json(s, old.expected_hash(s.name)) for s in (old.for_host(host) if old else []) if host not in gone]
        secs = {"containers": sec(json.dumps(found)), "image.0": sec(f"{held}\n")}
        if host == "head":
            secs["health"] = sec("HTTP/1.1 200 OK")
        out[host] = host_facts(new, host, **{k.replace(".", "__"): v for k, v in secs.items()})
    return out


def checked(
    new: Inventory, running: Inventory | None = INV, *, held: str = ID1, gone: tuple[str, ...] = (), force=False
) -> Recap:
    """The reload playbook's runtime steps planned in check mode for NEW on that cluster."""
    ctx = RunContext(inventory=new, fleet=None, facts=cluster_facts(new, running, held, gone), check_mode=True, force=force)
    plans = [p for step in (StopStep(), RuntimeStep()) for p in step.plan(ctx).values()]
    return Recap(playbook="reload", check_mode=True, plans=plans)


def plan(kind: str, rec: AppliedRecord | None, new: Inventory, events=(), warm=True, **running):
    """plan_reload over the check-mode plans of a cluster that runs the recorded config."""
    base = Inventory.model_validate(rec.inventory) if rec else None
    return plan_reload(kind, rec, new, [Event.model_validate(e) for e in events], warm, checked(new, base, **running))


def test_a_served_name_change_restarts_the_engine_warm():
    p = plan("reload", recorded(), changed(served_model_name="renamed"))
    assert [c.path for c in p.changes] == ["runtime.served_model_name"]
    assert p.groups == ["engine"] and p.containers == ["sparkctl-worker", "sparkctl-head"]
    assert p.prediction == "warm" and p.compile_changed == []


def test_a_scheduler_change_is_predicted_cold_and_says_which_field():
    p = plan("reload", recorded(), changed(max_num_seqs=2))
    assert p.prediction == "cold" and p.compile_changed == ["runtime.max_num_seqs"]
    assert any("compile inputs changed: runtime.max_num_seqs" in line for line in p.lines())


def test_a_drafter_only_change_restarts_the_drafter_only_and_predicts_no_engine_start():
    p = plan("reload", recorded(), changed(speculative__drafter_image="10.231.0.1:5000/sparkctl/vllm-sim:drafter"))
    assert p.groups == ["drafter"] and p.containers == ["sparkctl-drafter"] and p.prediction is None


def test_switching_ray_to_mp_and_back_restarts_the_engine_warm_and_leaves_the_drafter():
    # vLLM 0.33's compile hash ignores the executor and the multi-node launch (config/parallel.py
    # compute_hash: distributed_executor_backend, master_addr, master_port, nnodes, node_rank)
    to_mp = changed(distributed_executor_backend="mp")
    p = plan("reload", recorded(), to_mp)
    assert [c.path for c in p.changes] == ["runtime.distributed_executor_backend"]
    assert p.groups == ["engine"] and p.containers == ["sparkctl-worker", "sparkctl-head"]
    assert p.prediction == "warm" and p.compile_changed == []
    back = plan("reload", recorded(to_mp), changed(master_port=29600))
    assert back.groups == ["engine"] and back.prediction == "warm"


def test_expected_time_comes_from_this_clusters_history():
    events = [{"cache": "warm", "start_seconds": s} for s in (1.0, 9.0, 2.0)] + [{"cache": "cold", "start_seconds": 700}]
    assert plan("reload", recorded(), changed(served_model_name="x"), events).expected_seconds == 2.0


def test_restart_restarts_every_group_of_the_recorded_config():
    p = plan("restart", recorded(), INV, force=True)
    assert p.changes == [] and p.groups == ["drafter", "engine"]


def test_another_cluster_is_refused_naming_the_field():
    d = INV.model_dump(mode="json")
    d["hosts"]["worker"]["ssh"]["address"] = "10.231.0.99"
    with pytest.raises(InputError, match=r"hosts.worker.ssh differs"):
        same_cluster(INV, Inventory.model_validate(d))
    d = INV.model_dump(mode="json")
    del d["hosts"]["offload"]
    d.pop("engram", None)
    d["runtime"].pop("speculative", None)
    for h in d["hosts"].values():
        h["fabric"] = [x for x in h["fabric"] if x["peer"] != "offload"]
    with pytest.raises(InputError, match="not the same cluster"):
        same_cluster(INV, Inventory.model_validate(d))


def test_secrets_come_back_from_the_current_inventory_and_never_from_the_record():
    with_secret = changed(env={**INV.runtime.env, "HF_TOKEN": "hf_" + "a" * 30})
    rec = recorded(with_secret)
    assert "hf_" not in str(dump(rec))  # the record keeps a digest only
    assert restore_secrets(rec.inventory, with_secret).runtime.env["HF_TOKEN"] == "hf_" + "a" * 30
    rotated = changed(env={**INV.runtime.env, "HF_TOKEN": "hf_" + "b" * 30})
    with pytest.raises(InputError, match="runtime.env.HF_TOKEN"):
        restore_secrets(rec.inventory, rotated)


def test_a_secret_change_shows_as_masked_in_the_diff():
    a = changed(env={**INV.runtime.env, "WANDB_API_KEY": "k" * 20})
    b = changed(env={**INV.runtime.env, "WANDB_API_KEY": "z" * 20})
    (c,) = diff_inventories(a.model_dump(mode="json"), b.model_dump(mode="json"))
    assert c.path == "runtime.env.WANDB_API_KEY" and c.old == c.new == "***"


PAGE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} 0
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {length}
vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 1
vllm:request_success_total{{engine="0",finished_reason="abort",model_name="m"}} {abort}
"""


def test_drain_counts_from_metrics_before_and_during_the_drain():
    first = parse_page(PAGE.format(running=3, length=10, abort=0))
    last = parse_page(PAGE.format(running=1, length=12, abort=0))
    assert drain_counts(first, last, None) == {"in_flight": 3, "finished": 2, "cut": 1}
    # vLLM's own line (`draining in-flight requests count=%d`) wins over the scrape
    assert drain_counts(first, last, 4) == {"in_flight": 4, "finished": 2, "cut": 2}
    assert drain_counts(None, None, None) == {"in_flight": 0, "finished": 0, "cut": 0}


def test_going_back_to_a_config_this_cluster_served_is_warm_again():
    from sparkctl.runtime.compile_cache import compile_key

    now = recorded(changed(max_num_seqs=2))
    back = plan("reload", now, INV, [{"outcome": "applied", "compile_key": compile_key(INV.model_dump(mode="json"))}])
    assert back.prediction == "warm" and back.compile_changed == ["runtime.max_num_seqs"]
    never = plan("reload", now, changed(max_num_seqs=3))
    assert never.prediction == "cold"


def test_drain_counts_from_vllms_own_shutdown_lines():
    from sparkctl.steps.runtime import drain_from_log

    prefix = "(EngineCore pid=2) INFO 12-01 01:00:00 [core.py:%d] "
    drained = (
        prefix % 1732
        + "[shutdown] EngineCore: draining in-flight requests count=3 timeout=30s\n"
        + prefix % 1743
        + "[shutdown] EngineCore: request processing complete; starting resource teardown\n"
    )
    assert drain_from_log(drained) == ({"in_flight": 3, "finished": 3, "cut": 0}, 3)
    aborted = prefix % 1721 + "[shutdown] EngineCore: aborting in-flight requests count=2\n"
    assert drain_from_log(aborted) == ({"in_flight": 2, "finished": 0, "cut": 2}, 2)
    timed_out = prefix % 1732 + "[shutdown] EngineCore: draining in-flight requests count=4 timeout=5s\n"
    assert drain_from_log(timed_out) == (None, 4)  # killed at the timeout: /metrics must say how many finished
    assert drain_from_log("") == (None, None)


def test_a_rollback_after_an_interrupted_reload_plans_from_what_runs_not_only_the_record():
    assert plan("rollback", recorded(), INV).groups == []  # all runs the last good config
    back = plan("rollback", recorded(), INV, gone=("head",))  # the interrupted reload had stopped the head
    assert back.groups == ["engine"] and back.containers == ["sparkctl-worker", "sparkctl-head"]
    assert back.prediction == "warm"


def test_the_same_config_restarts_what_runs_another_image_than_the_node_holds_under_its_tag():
    # no field changes; every node now holds ID2 under the tag while the containers run ID1: the
    # runtime step restarts them all, and so does the plan (a plan from group hashes said nothing)
    p = plan("reload", recorded(), INV, held=ID2)
    assert p.changes == [] and p.groups == ["drafter", "engine"] and not p.empty
    assert p.containers == [c.name for c in render(INV).containers]
    assert "restarts: nothing" not in "\n".join(p.lines())
    quiet = plan("reload", recorded(), INV)
    assert quiet.empty and quiet.groups == [] and "restarts: nothing (no container's config changes)" in quiet.lines()


def test_a_run_restarts_only_what_the_plan_confirmed():
    """The stop step of the run refuses (nothing stopped) when the cluster changed after the plan
    was shown: here the plan said the drafter, and the engine's head has gone since."""
    new = changed(speculative__drafter_image="10.231.0.1:5000/sparkctl/vllm-sim:drafter")
    shown = plan("reload", recorded(), new)
    assert shown.containers == ["sparkctl-drafter"]
    base = Inventory.model_validate(recorded().inventory)
    for gone, refused in (((), False), (("head",), True)):
        run = RunContext(inventory=new, fleet=None, facts=cluster_facts(new, base, gone=gone),
                         options=RunOptions(confirmed_restart=tuple(shown.containers)))  # fmt: skip
        first = next(iter(StopStep().plan(run).values()))
        assert bool(first.blocked) is refused, first
    assert (
        "the plan restarts sparkctl-drafter, this run would restart sparkctl-drafter, sparkctl-worker, sparkctl-head"
        in first.blocked
    )
    assert "nothing was stopped" in first.blocked


def test_moving_the_cuda_jit_cache_or_the_volume_is_predicted_cold():
    p = plan("reload", recorded(), changed(env={**INV.runtime.env, "CUDA_CACHE_PATH": "/tmp/jit"}))
    assert p.prediction == "cold" and p.compile_changed == ["runtime.env.CUDA_CACHE_PATH"]
    d = INV.model_dump(mode="json")
    d["caches"]["host_path"] = "/srv/other-cache"
    p = plan("reload", recorded(), Inventory.model_validate(d))
    assert p.prediction == "cold" and p.compile_changed == ["caches.host_path"]


def test_a_check_run_that_stopped_makes_a_plan_that_says_so_and_is_never_nothing_to_do():
    from sparkctl.runner import CONNECT
    from sparkctl.steps.base import StepResult

    # what the runner reports for a host whose facts could not be read: no step planned after it
    stopped = Recap(playbook="reload", check_mode=True)
    stopped.results.append(StepResult(CONNECT, "worker", "failed", "worker: SSH connect to 10.231.0.12:22 timed out after 3 s"))
    p = plan_reload("reload", recorded(), INV, [], True, stopped)
    assert p.groups == [] and not p.empty  # the run goes on to meet the failure and report it
    assert p.stops == "connect on worker: worker: SSH connect to 10.231.0.12:22 timed out after 3 s"
    assert p.lines()[-1] == f"the run would stop here: {p.stops}"


def test_every_reload_step_names_its_journal_phase_and_a_playbook_without_them_is_refused():
    # the phase sits on the playbook entry: a step added to reload.yaml without one cannot run unjournaled
    phases = {s.name: s.spec.phase for s in reload_stages()}
    assert phases == {
        **dict.fromkeys(["preflight", "fabric", "images", "weights", "caches", "engram"], "prestage"),
        "stop": "drain",
        "gateway": "restart",
        "runtime": "restart",
        "throughput": "verify",
        "record": "commit",
    }
    assert list(dict.fromkeys(phases.values())) == [p for p in Journal.ORDER if p in phases.values()]  # in journal order
    with pytest.raises(InputError, match=r"playbook 'up': step\(s\) preflight, fabric, .* name no journal phase") as e:
        reload_stages("up")  # up.yaml's entries name no phase
    assert "`phase:`" in (e.value.fix or "")
