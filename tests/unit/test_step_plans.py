"""Images, caches, runtime and record steps: plans from recorded facts, no host needed."""

from __future__ import annotations

import json
from pathlib import Path

from sparkctl.facts.probe import Section
from sparkctl.inventory.loader import load_inventory
from sparkctl.runtime.launch import render
from sparkctl.steps.base import RunContext
from sparkctl.steps.caches import CachesStep
from sparkctl.steps.images import ImagesStep
from sparkctl.steps.record import RecordStep
from sparkctl.steps.runtime import RuntimeStep

ROOT = Path(__file__).resolve().parents[2]
INV = load_inventory(ROOT / "inventories" / "lab.yaml")
IMAGE = INV.runtime.image
ID1 = "sha256:" + "1" * 64
ID2 = "sha256:" + "2" * 64


def ctx(facts, **kw) -> RunContext:
    return RunContext(inventory=INV, fleet=None, facts=facts, **kw)


def images_facts(ids: dict[str, str | None]):
    return {h: {"ids": Section(0, f"{IMAGE} {i or ''}\n")} for h, i in ids.items()}


def test_images_present_everywhere_with_one_id_is_a_noop():
    c = ctx(images_facts({"head": ID1, "worker": ID1, "offload": ID1}))
    plans = [ImagesStep().plan(c, h) for h in ("head", "worker", "offload")]
    assert all(p.empty for p in plans)
    assert "present (111111111111)" in plans[0].reason


def test_missing_image_on_one_node_refreshes_every_node_from_the_registry():
    c = ctx(images_facts({"head": ID1, "worker": None, "offload": ID1}))
    plans = {h: ImagesStep().plan(c, h) for h in ("head", "worker", "offload")}
    assert all([(ch.action, ch.data["image"]) for ch in p.changes] == [("pull", IMAGE)] for p in plans.values())
    assert "(missing)" in plans["worker"].reason
    assert "missing on worker: refresh from the registry" in plans["head"].reason


def test_nodes_that_disagree_all_pull_and_side_load_copies_the_heads():
    c = ctx(images_facts({"head": ID1, "worker": ID2, "offload": ID1}))
    assert "nodes hold 2 different IDs" in ImagesStep().plan(c, "head").reason
    c = ctx(images_facts({"head": ID1, "worker": ID2, "offload": ID1}), options={"side_load": True})
    assert ImagesStep().plan(c, "head").empty
    plan = ImagesStep().plan(c, "worker")
    assert plan.changes[0].action == "side-load"
    assert "differs from the cluster's 111111111111" in plan.changes[0].summary


def test_pull_option_pulls_everywhere():
    c = ctx(images_facts({"head": ID1, "worker": ID1, "offload": ID1}), options={"pull": True})
    assert all(ImagesStep().plan(c, h).changes[0].summary.endswith("(--pull)") for h in ("head", "worker", "offload"))


def test_cache_dir_missing_is_created_present_is_reported_warm_or_cold():
    step = CachesStep()
    assert step.plan(ctx({"head": {"cache": Section(1, "stat: cannot statx")}}), "head").changes[0].action == "mkdir"
    cold = step.plan(ctx({"head": {"cache": Section(0, "directory\n0\n")}}), "head")
    assert cold.empty and "next start compiles (cold)" in cold.reason
    warm = step.plan(ctx({"head": {"cache": Section(0, "directory\n2\n")}}), "head")
    assert warm.empty and "holds 2 compile cache(s)" in warm.reason


def runtime_facts(hash_by_host: dict[str, str], state="running", health="HTTP/1.1 200 OK"):
    names = {"head": "sparkctl-head", "worker": "sparkctl-worker", "offload": "sparkctl-drafter"}
    facts = {}
    for h, name in names.items():
        line = f"/{name}|{state}|{hash_by_host.get(h, '')}|{ID1}\n" if h in hash_by_host else ""
        facts[h] = {"containers": Section(0, line)}
    facts["head"]["health"] = Section(0, health)
    return facts


def test_runtime_matching_hash_and_healthy_is_left_running():
    want = render(INV).config_hash
    c = ctx(runtime_facts({"head": want, "worker": want, "offload": want}))
    plans = [RuntimeStep().plan(c, h) for h in RuntimeStep().hosts(INV)]
    assert all(p.empty for p in plans)
    assert f"running config {want}" in plans[-1].reason


def test_runtime_one_stale_node_restarts_every_node_in_order():
    want = render(INV).config_hash
    c = ctx(runtime_facts({"head": want, "worker": "0ld", "offload": want}))
    step = RuntimeStep()
    assert step.hosts(INV) == ["offload", "worker", "head"] and step.sequential
    plans = [step.plan(c, h) for h in step.hosts(INV)]
    assert all(not p.empty for p in plans)  # vLLM has no partial restart
    assert "sparkctl-worker on worker runs config 0ld" in plans[0].reason


def test_runtime_restarts_when_a_node_now_holds_a_newer_image():
    want = render(INV).config_hash
    c = ctx(runtime_facts({"head": want, "worker": want, "offload": want}))
    c.shared["image_ids"] = {"worker": {IMAGE: ID2}}
    assert "sparkctl-worker on worker runs image 111111111111, the node now has 222222222222" in (
        RuntimeStep().plan(c, "head").reason
    )


def test_runtime_force_restarts_and_dead_head_restarts():
    want = render(INV).config_hash
    facts = runtime_facts({"head": want, "worker": want, "offload": want})
    assert not RuntimeStep().plan(ctx(facts, force=True), "head").empty
    dead = runtime_facts({"head": want, "worker": want, "offload": want}, health="refused")
    assert "does not answer /health" in RuntimeStep().plan(ctx(dead), "head").reason


def test_record_same_hash_is_a_noop_otherwise_records():
    want = render(INV).config_hash
    same = {"head": {"applied": Section(0, json.dumps({"config_hash": want, "applied_at": "t"}))}}
    assert RecordStep().plan(ctx(same), "head").empty
    other = {"head": {"applied": Section(0, json.dumps({"config_hash": "old", "applied_at": "2026-11-01T00:00:00Z"}))}}
    plan = RecordStep().plan(ctx(other), "head")
    assert plan.changes[0].data["previous"] == "2026-11-01T000000Z-old.json"
