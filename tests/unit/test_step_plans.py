"""Images, caches, stop/runtime and record steps: cluster-wide plans from recorded output parsed
by the fact layer, no host needed."""

from __future__ import annotations

import json

from hostfacts import host_facts, inventory, sec

from sparkctl.runtime.launch import LABEL_PREFIX, render
from sparkctl.steps.base import RunContext
from sparkctl.steps.caches import CachesStep
from sparkctl.steps.images import ImagesStep
from sparkctl.steps.record import RecordStep
from sparkctl.steps.runtime import RuntimeStep, StopStep

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


# images


def test_images_present_everywhere_with_one_id_is_a_noop_and_the_ids_are_the_output():
    c = ctx(facts())
    plans = ImagesStep().plan(c)
    assert all(p.empty for p in plans.values())
    assert "present (111111111111)" in plans["head"].reason
    assert c.outputs.image_ids == {h: {IMAGE: ID1} for h in HOSTS}


def test_missing_image_on_one_node_pulls_everywhere_and_may_fall_back_to_a_named_side_load():
    c = ctx(facts(ids={"head": ID1, "worker": None, "offload": ID1}))
    plans = ImagesStep().plan(c)
    assert all([(ch.action, ch.data["image"]) for ch in p.changes] == [("pull", IMAGE)] for p in plans.values())
    assert "(missing); if the registry fails, side-load from head" in plans["worker"].changes[0].summary
    assert plans["worker"].changes[0].data["fallback"] == "head"
    assert plans["head"].changes[0].data["fallback"] is None  # it has the image: a failed pull fails
    assert c.outputs.image_ids["worker"] == {IMAGE: ID1}  # predicted: every node that has it agrees


def test_nodes_that_disagree_pull_with_an_unknown_outcome_and_side_load_copies_the_heads():
    c = ctx(facts(ids={"head": ID1, "worker": ID2, "offload": ID1}))
    assert "nodes hold 2 different IDs" in ImagesStep().plan(c)["head"].reason
    assert c.outputs.image_ids["head"] == {IMAGE: None}  # the registry decides
    c = ctx(facts(ids={"head": ID1, "worker": ID2, "offload": ID1}), options={"side_load": True})
    plans = ImagesStep().plan(c)
    assert plans["head"].empty
    assert plans["worker"].changes[0].action == "side-load" and plans["worker"].changes[0].data["source"] == "head"
    assert "differs from the cluster's 111111111111" in plans["worker"].changes[0].summary


def test_pull_option_pulls_everywhere():
    plans = ImagesStep().plan(ctx(facts(), options={"pull": True}))
    assert all(p.changes[0].summary.startswith(f"pull {IMAGE} (--pull)") for p in plans.values())


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
    want = render(INV).config_hash
    c = ctx(facts(hashes={h: want for h in HOSTS}))
    assert all(p.empty for p in StopStep().plan(c).values())
    plans = RuntimeStep().plan(c)
    assert all(p.empty for p in plans.values())
    assert f"running config {want}" in plans["head"].reason


def test_one_stale_node_stops_head_first_then_starts_every_node_in_engine_order():
    want = render(INV).config_hash
    c = ctx(facts(hashes={"head": want, "worker": "0ld", "offload": want}))
    stop = StopStep().plan(c)
    assert list(stop) == ["head", "worker", "offload"]  # head first: it drains
    assert [ch.action for ch in stop["head"].changes] == ["barrier", "stop"]  # nothing stops before the barrier
    assert "sparkctl-worker on worker runs config 0ld" in stop["head"].reason
    start = RuntimeStep().plan(c)
    assert list(start) == ["offload", "worker", "head"]  # vLLM has no partial restart
    assert [ch.action for ch in start["head"].changes] == ["start", "wait-serving"]


def test_a_newer_image_under_the_tag_restarts_even_in_check_mode():
    # every node holds ID2 under the tag, the containers still run ID1: --check must say restart
    want = render(INV).config_hash
    c = ctx(facts(ids={h: ID2 for h in HOSTS}, hashes={h: want for h in HOSTS}), check_mode=True)
    ImagesStep().plan(c)  # the images step's declared output: what each node holds once it is done
    reason = RuntimeStep().plan(c)["head"].reason
    assert "sparkctl-head on head runs image 111111111111, the node now has 222222222222" in reason


def test_force_restarts_and_a_dead_head_restarts():
    want = render(INV).config_hash
    assert not RuntimeStep().plan(ctx(facts(hashes={h: want for h in HOSTS}), force=True))["head"].empty
    dead_log = "@@ctr head-ctr\nEngineCore encountered a fatal error.\n"
    c = ctx(facts(hashes={h: want for h in HOSTS}, health="refused", logs=dead_log))
    reason = RuntimeStep().plan(c)["head"].reason
    assert "does not answer /health (refused); its log shows: EngineCore encountered a fatal error." in reason


def test_a_loading_head_is_waited_for_never_restarted():
    want = render(INV).config_hash
    c = ctx(facts(hashes={h: want for h in HOSTS}, health="refused", logs="@@ctr head-ctr\n"))
    assert all(p.empty for p in StopStep().plan(c).values())
    plans = RuntimeStep().plan(c)
    assert [ch.action for ch in plans["head"].changes] == ["wait-serving"]
    assert "not restarting it: head still loading" in plans["head"].changes[0].summary
    assert plans["worker"].empty


def test_down_stops_whatever_runs_head_first():
    step = StopStep()
    step.options = {"always": True}
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
    assert record_plan({"config_hash": want, "applied_at": "t"}).empty
    p = record_plan({"config_hash": "old", "applied_at": "2026-11-01T00:00:00Z"})
    assert p.changes[0].data["previous"] == "2026-11-01T000000Z-old.json"
    # same config, but a node now holds another image: recorded again
    assert not record_plan({"config_hash": want, "applied_at": "t", "images": {}}, {"head": {IMAGE: ID2}}).empty
