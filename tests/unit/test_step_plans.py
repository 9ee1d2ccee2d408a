"""Images, caches, stop/runtime and record steps: cluster-wide plans from recorded output parsed
by the fact layer, no host needed."""

from __future__ import annotations

import json

from hostfacts import host_facts, inventory, sec

from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.launch.plan import render
from sparkctl.steps.base import RunContext, StepOptions
from sparkctl.steps.caches import CachesStep
from sparkctl.steps.images import ImagesStep
from sparkctl.steps.record import RecordStep
from sparkctl.steps.runtime import RuntimeStep, StopStep, planned_starts
from sparkctl.transport.redact import redact_obj

INV = inventory()
IMAGE = INV.runtime.image
ID1 = "sha256:" + "1" * 64
ID2 = "sha256:" + "2" * 64
HOSTS = ("head", "worker", "offload")
NAMES = {"head": "sparkctl-head", "worker": "sparkctl-worker", "offload": "sparkctl-drafter"}
ROLES = {"head": "head", "worker": "worker", "offload": "drafter"}


def image_section(iid):
    # `docker image inspect --format '{{.Id}}'` as the `image` fact reads it
    return sec(f"{iid}\n") if iid else sec(f"Error: No such image: {IMAGE}\n", 1)


WANT = {h: render(INV).expected_hash(NAMES[h]) for h in HOSTS}  # each container's restart-group hash


def container_json(host, config_hash, state="running", image_id=ID1):
    return {
        "Id": f"{host}-ctr", "Name": f"/{NAMES[host]}", "Image": image_id,
        "State": {"Status": state, "ExitCode": 0, "StartedAt": "2026-12-01T00:00:00.000000000Z"},
        "Config": {"Image": IMAGE, "Labels": {f"{LABEL_PREFIX}.cluster": "lab", f"{LABEL_PREFIX}.role": ROLES[host],
                                              f"{LABEL_PREFIX}.config-hash": config_hash}},
        "HostConfig": {},
    }  # fmt: skip


def facts(ids=None, hashes=None, state="running", health="HTTP/1.1 200 OK", running_image=ID1, logs=None, **extra):
    ids = ids or {h: ID1 for h in HOSTS}
    out = {}
    for h in HOSTS:
        secs = {"image.0": image_section(ids.get(h))}
        if hashes is not None:
            found = [container_json(h, hashes[h], state, running_image)] if h in hashes else []
            secs["containers"] = sec(json.dumps(found))
        if h == "head":
            secs["health"] = sec(health)
            if logs is not None:
                secs["logs"] = sec(logs)
        secs.update(extra.get(h, {}))
        out[h] = host_facts(INV, h, **{k.replace(".", "__"): v for k, v in secs.items()})
    return out


def ctx(f, **kw) -> RunContext:
    return RunContext(inventory=INV, fleet=None, facts=f, **kw)


# images: provenance plans are in test_image_transport_provenance.py (issue 14)


def registry_down(ref, **kw):
    from sparkctl.transport.registry import RegistryUnreachable

    raise RegistryUnreachable(f"registry of {ref}: connection refused")


# caches


def cache_plan(out):
    return CachesStep().plan(ctx({"head": host_facts(INV, "head", cache=sec(out))}))["head"]


def test_cache_dir_missing_is_created_present_is_reported_warm_or_cold():
    assert cache_plan("missing\n").changes[0].action == "mkdir"
    cold = cache_plan("present\n")
    assert cold.empty and "next start compiles (cold)" in cold.reason
    warm = cache_plan("present\nd ./9abac87d86\ni ./9abac87d86/rank_0_0/backbone/vllm_compile_cache.py\n")
    assert warm.empty and "holds 1 compile cache(s)" in warm.reason
    assert cache_plan("not-a-directory\n").blocked


# stop + runtime (one decision, two steps)


def test_runtime_matching_hash_image_and_healthy_is_left_running():
    c = ctx(facts(hashes=WANT))
    assert all(p.empty for p in StopStep().plan(c).values())
    plans = RuntimeStep().plan(c)
    assert all(p.empty for p in plans.values())
    assert f"sparkctl-head running config {WANT['head']}" in plans["head"].reason


def test_one_stale_node_stops_head_first_then_starts_every_node_in_engine_order():
    c = ctx(facts(hashes={**WANT, "worker": "0ld"}))
    stop = StopStep().plan(c)
    assert list(stop) == ["head", "worker", "offload"]  # head first: it drains
    assert [ch.action for ch in stop["head"].changes] == ["barrier", "stop"]  # nothing stops before the barrier
    assert "sparkctl-worker on worker runs config 0ld" in stop["head"].reason
    start = RuntimeStep().plan(c)
    assert list(start) == ["offload", "worker", "head"]  # vLLM has no partial restart
    assert [ch.action for ch in start["head"].changes] == ["start", "wait-serving"]


def test_a_newer_image_under_the_tag_restarts_even_in_check_mode():
    # every node holds ID2 under the tag, the containers still run ID1: --check must say restart
    c = ctx(facts(ids={h: ID2 for h in HOSTS}, hashes=WANT), check_mode=True)
    ImagesStep(registry_down).plan(c)  # the images step's declared output: what each node holds once it is done
    reason = RuntimeStep().plan(c)["head"].reason
    assert "sparkctl-head on head runs image 111111111111, the node now has 222222222222" in reason


def test_force_restarts_and_a_dead_head_restarts():
    assert not RuntimeStep().plan(ctx(facts(hashes=WANT), force=True))["head"].empty
    dead_log = "@@ctr head-ctr\nEngineCore encountered a fatal error.\n"
    c = ctx(facts(hashes=WANT, health="refused", logs=dead_log))
    reason = RuntimeStep().plan(c)["head"].reason
    assert "does not answer /health (refused); its log shows: EngineCore encountered a fatal error." in reason


def test_a_loading_head_is_waited_for_never_restarted():
    c = ctx(facts(hashes=WANT, health="refused", logs="@@ctr head-ctr\n"))
    assert all(p.empty for p in StopStep().plan(c).values())
    plans = RuntimeStep().plan(c)
    assert [ch.action for ch in plans["head"].changes] == ["wait-serving"]
    assert "not restarting it: head still loading" in plans["head"].changes[0].summary
    assert plans["worker"].empty


def test_a_drafter_only_change_restarts_the_drafter_only():
    c = ctx(facts(hashes={**WANT, "offload": "0ld-drafter"}))
    stop = StopStep().plan(c)
    # the running drafter is not stopped here: the runtime step replaces it (the new container is
    # created first, started the moment the old one stops), the shortest outage the head must ride out
    assert [(h, [ch.action for ch in p.changes]) for h, p in stop.items()] == [
        ("head", ["barrier"]), ("worker", []), ("offload", []),
    ]  # fmt: skip
    assert "sparkctl-drafter serves until the runtime step replaces it" in stop["offload"].reason
    start = RuntimeStep().plan(c)
    assert [ch.action for ch in start["offload"].changes] == ["replace", "wait-drafter"]
    assert "new container created first" in start["offload"].changes[0].summary
    # the engine stays up; once the new drafter answers, the head must still serve (it rode out the outage)
    assert [ch.action for ch in start["head"].changes] == ["check-head"] and start["worker"].empty
    assert planned_starts(start.values()) == {"sparkctl-drafter"}


def test_a_drafter_that_stopped_is_started_not_replaced():
    exited = sec(json.dumps([container_json("offload", "0ld-drafter", "exited")]))  # nothing serves to keep
    c = ctx(facts(hashes={**WANT, "offload": "0ld-drafter"}, offload={"containers": exited}))
    assert [ch.action for ch in StopStep().plan(c)["offload"].changes] == ["stop"]
    assert [ch.action for ch in RuntimeStep().plan(c)["offload"].changes] == ["start", "wait-drafter"]


def test_a_restart_of_both_groups_stops_the_drafter_with_the_engine():
    c = ctx(facts(hashes={"head": "0ld-engine", "worker": "0ld-engine", "offload": "0ld-drafter"}))
    assert [ch.action for ch in StopStep().plan(c)["offload"].changes] == ["stop"]
    assert [ch.action for ch in RuntimeStep().plan(c)["offload"].changes] == ["start", "wait-drafter"]


def test_a_head_only_change_restarts_the_engine_and_keeps_the_drafter():
    c = ctx(facts(hashes={**WANT, "head": "0ld-engine", "worker": "0ld-engine"}))
    assert StopStep().plan(c)["offload"].empty
    start = RuntimeStep().plan(c)
    assert start["offload"].empty and [ch.action for ch in start["head"].changes] == ["start", "wait-serving"]


def test_down_stops_whatever_runs_head_first():
    step = StopStep()
    step.options = StepOptions(always=True)
    plans = step.plan(ctx(facts(hashes={"head": "x", "offload": "y"})))
    assert [(h, [c.action for c in p.changes]) for h, p in plans.items()] == [
        ("head", ["stop"]), ("worker", []), ("offload", ["stop"]),
    ]  # fmt: skip


# record


def record_plan(applied: dict, image_ids=None):
    c = ctx({"head": host_facts(INV, "head", applied=sec(json.dumps(applied)))})
    c.outputs.image_ids = image_ids or {}
    return RecordStep().plan(c)["head"]


def test_record_same_hash_is_a_noop_otherwise_records_with_history():
    want = render(INV).config_hash
    inv = redact_obj(INV.model_dump(mode="json"), digests=True)  # as the record stores it
    assert record_plan({"config_hash": want, "applied_at": "t", "inventory": inv}).empty
    p = record_plan({"config_hash": "old", "applied_at": "2026-11-01T00:00:00Z", "inventory": inv})
    assert p.changes[0].data["previous"] == "2026-11-01T000000Z-old.json"
    # same config, but a node now holds another image: recorded again
    assert not record_plan({"config_hash": want, "applied_at": "t", "images": {}, "inventory": inv}, {"head": {IMAGE: ID2}}).empty


def test_a_field_outside_the_launch_is_recorded_and_the_old_record_kept():
    # alerts.* changes no launch hash; unrecorded, every later reload would diff against the old value
    want = render(INV).config_hash
    old = redact_obj(INV.model_dump(mode="json"), digests=True)
    old["alerts"]["ttft_p99_seconds"] = old["alerts"]["ttft_p99_seconds"] + 1
    p = record_plan({"config_hash": want, "applied_at": "2026-11-01T00:00:00Z", "inventory": old})
    assert [c.action for c in p.changes] == ["record"] and "inventory fields outside the launch changed" in p.changes[0].summary
    assert p.changes[0].data["previous"] == f"2026-11-01T000000Z-{want}.json"
