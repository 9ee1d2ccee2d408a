"""The images step's provenance: which image every node must hold, decided from the registry's
recorded answers (tests/unit/recorded/image_transport/registry-lab.json, replayed through httpx)
or, with the registry down, from the head's applied.json; drift named per node, head included.
Nodes answer the image probe with recorded `docker image inspect` output (image_samples.py)."""

from __future__ import annotations

import functools
import json

import httpx
from hostfacts import host_facts, inventory, sec
from image_samples import CLASSIC, inspect_section, rebuilt
from test_image_transport_registry import recorded, recorded_manifest

from sparkctl.steps.base import RunContext, RunOptions
from sparkctl.steps.images import ImagesStep
from sparkctl.transport import registry
from sparkctl.transport.image_identity import identity_of_inspect, short

INV = inventory()
IMAGE = INV.runtime.image
DIGEST, MANIFEST = recorded_manifest()
assert CLASSIC["Id"] == MANIFEST["config"]["digest"]  # recorded together: the image the registry's tag names
GOOD = identity_of_inspect(CLASSIC)  # what the registry's tag names
HANDMADE = rebuilt(CLASSIC)  # an image built by hand under the tag
HAND = identity_of_inspect(HANDMADE)
DOCS = {GOOD: CLASSIC, HAND: HANDMADE}
HOSTS = ("head", "worker", "offload")


def up_registry():
    return functools.partial(registry.resolve, transport=recorded(https_works=False))


def down_registry():
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    return functools.partial(registry.resolve, transport=httpx.MockTransport(refuse))


def facts(ids: dict, applied: dict | None = None) -> dict:
    out = {}
    for h in HOSTS:
        secs = {"image__0": inspect_section(DOCS.get(ids.get(h)), IMAGE)}
        if h == "head" and applied is not None:
            secs["applied"] = sec(json.dumps(applied))
        out[h] = host_facts(INV, h, **secs)
    return out


def record(image_id=GOOD, inv=INV) -> dict:
    return {"config_hash": "x", "applied_at": "2026-12-01T00:00:00Z", "inventory": inv.model_dump(mode="json"),
            "images": {h: {IMAGE: image_id} for h in HOSTS}}  # fmt: skip


def plan(ids, applied=None, resolver=None, inv=INV, **options):
    ctx = RunContext(inventory=inv, fleet=None, facts=facts(ids, applied), options=RunOptions(**options))
    return ImagesStep(resolver or up_registry()).plan(ctx), ctx


def test_every_node_holding_the_registrys_image_is_a_noop_saying_so():
    plans, ctx = plan({h: GOOD for h in HOSTS})
    assert all(p.empty and not p.blocked for p in plans.values())
    assert f"{short(GOOD)} already current in the registry (tag = manifest {short(DIGEST)})" in plans["head"].reason
    assert ctx.outputs.image_ids == {h: {IMAGE: GOOD} for h in HOSTS}


def test_a_head_rebuilt_by_hand_is_the_drifted_node_and_pulls_back_the_registrys_image():
    plans, ctx = plan({"head": HAND, "worker": GOOD, "offload": GOOD})
    head = plans["head"]
    assert [c.action for c in head.changes] == ["pull"]
    assert f"drift: holds {short(HAND)}, should hold {short(GOOD)}" in head.changes[0].summary
    assert head.changes[0].data["source"] in ("worker", "offload")  # a verified node, if the pull fails
    assert plans["worker"].empty and plans["offload"].empty  # the peers are not blamed
    assert ctx.outputs.image_ids["head"] == {IMAGE: GOOD}


def test_registry_down_the_record_names_the_drifted_head_and_nothing_is_copied():
    plans, _ = plan({"head": HAND, "worker": GOOD, "offload": GOOD}, applied=record(), resolver=down_registry())
    head = plans["head"]
    assert head.blocked and not head.changes
    assert head.blocked.startswith(f"head: {IMAGE} drift: holds {short(HAND)}, should hold {short(GOOD)}")
    assert "last good in applied.json (2026-12-01T00:00:00Z)" in head.blocked
    assert "Connection refused" in head.blocked
    assert f"rerun `sparkctl up` (head pulls {IMAGE})" in head.blocked
    assert "`sparkctl up --side-load` to copy it from worker" in head.blocked
    assert not any(p.changes for p in plans.values())
    assert not plans["worker"].blocked and not plans["offload"].blocked


def test_registry_down_a_missing_image_is_copied_from_a_verified_node_over_the_fabric():
    plans, _ = plan({"head": GOOD, "worker": None, "offload": GOOD}, applied=record(), resolver=down_registry())
    (c,) = plans["worker"].changes
    assert c.action == "copy" and c.data["source"] == "head"  # the node with a rail to the worker
    assert c.data["want"] == GOOD


def test_registry_down_and_no_node_holds_the_last_good_image_stops():
    plans, _ = plan({"head": HAND, "worker": None, "offload": HAND}, applied=record(), resolver=down_registry())
    assert "missing and no node holds the last good image" in plans["worker"].blocked
    assert f"drift: holds {short(HAND)}" in plans["head"].blocked and "drift" in plans["offload"].blocked
    assert not any(p.changes for p in plans.values())  # the hand-built image is never spread


def test_a_node_the_record_misses_takes_the_record_of_its_platform_only():
    applied = record()
    del applied["images"]["worker"], applied["images"]["offload"]
    plans, _ = plan({h: GOOD for h in HOSTS}, applied=applied, resolver=down_registry())
    assert "as last verified" in plans["worker"].reason  # a GB10 like the head: the head's record holds
    assert "not verified" in plans["offload"].reason  # the x86 host: an arm64 record proves nothing for it


def test_with_the_side_load_option_a_drift_is_repaired_from_a_verified_node():
    plans, _ = plan({"head": HAND, "worker": GOOD, "offload": GOOD}, applied=record(), resolver=down_registry(),
                    side_load=True)  # fmt: skip
    (c,) = plans["head"].changes
    assert c.action == "copy" and c.data["source"] == "worker" and c.data["want"] == GOOD


def test_nothing_to_verify_against_passes_agreement_and_never_copies():
    plans, ctx = plan({h: HAND for h in HOSTS}, resolver=down_registry())
    assert all(p.empty and not p.blocked for p in plans.values())
    assert "on every node, not verified" in plans["head"].reason
    plans, _ = plan({"head": HAND, "worker": None, "offload": HAND}, resolver=down_registry())
    assert "nothing to verify it against" in plans["worker"].blocked
    assert "an unverified image is never copied" in plans["worker"].blocked
    assert "load the same one on every node yourself (`docker save" in plans["worker"].blocked  # as the first pass does
    assert not any(p.changes for p in plans.values())


def test_a_digest_pin_pulls_by_digest_and_a_record_for_another_pin_proves_nothing():
    pinned = INV.model_copy(update={"runtime": INV.runtime.model_copy(update={"image_digest": DIGEST})})
    plans, _ = plan({"head": None, "worker": GOOD, "offload": GOOD}, inv=pinned)
    (c,) = plans["head"].changes
    assert c.data["pull"] == IMAGE.rsplit(":", 1)[0] + "@" + DIGEST and "pinned manifest" in c.summary
    other = "sha256:" + "0" * 64
    repinned = INV.model_copy(update={"runtime": INV.runtime.model_copy(update={"image_digest": other})})
    plans, _ = plan({h: GOOD for h in HOSTS}, applied=record(inv=pinned), inv=repinned, resolver=down_registry())
    assert "not verified" in plans["head"].reason  # the record was made under another pin


def test_pull_option_pulls_everywhere_from_the_registry():
    plans, _ = plan({h: GOOD for h in HOSTS}, pull=True)
    assert all([c.action for c in p.changes] == ["pull"] and "(--pull;" in p.changes[0].summary for p in plans.values())


# doctor: images.same names the drifted node against the record, not its peers


def doctor_images(ids: dict, applied: dict | None):
    import sparkctl.checks  # noqa: F401  (registers every check)
    from sparkctl.checks.base import REGISTRY, Context
    from sparkctl.checks.doctor import run_checks

    ctx = Context(inventory=INV, hosts=list(HOSTS), facts=facts(ids, applied))
    return {r.host: r for r in run_checks(ctx, [REGISTRY["images.same"]])}


def test_doctor_names_the_drifted_head_against_the_record():
    r = doctor_images({"head": HAND, "worker": GOOD, "offload": GOOD}, record())
    assert r["head"].status == "failed" and (r["worker"].status, r["offload"].status) == ("ok", "ok")
    assert f"is {short(HAND)} on head, should be {short(GOOD)}" in r["head"].message
    assert "last verified by `sparkctl up` at 2026-12-01T00:00:00Z" in r["head"].message
    assert f"`docker save {CLASSIC['Id']} | ssh head docker load`" in r["head"].fix  # the source's own docker ID


def test_doctor_without_a_record_follows_the_majority_and_a_tie_names_no_culprit():
    r = doctor_images({"head": HAND, "worker": GOOD, "offload": GOOD}, None)
    assert r["head"].status == "failed" and r["worker"].status == "ok"
    r = doctor_images({"head": HAND, "worker": GOOD, "offload": None}, None)
    assert r["head"].status == r["worker"].status == "failed"
    assert "no record says which is right" in r["head"].message
