"""Docker's two image stores (issue 20, items 1 and 6): one image has two docker IDs (the classic
store's config digest, containerd's manifest/index digest), so nodes, the registry and applied.json
compare its identity (facts/docker.py); and the disk that matters is the one the store keeps images
on. Samples: tests/unit/recorded/image_store (classic recorded on the lab, containerd derived from
moby's source, each file says which), the registry replayed from image_transport/registry-lab.json.
"""

from __future__ import annotations

import copy
import functools
import json

import clirun
from hostfacts import host_facts, inventory, sec
from image_samples import CLASSIC, CONTAINERD, CONTAINERD_26, REC, inspect_section, rebuilt
from test_image_transport_registry import recorded
from test_step_plans import WANT, container_json

import sparkctl.checks  # noqa: F401  (registers every check)
from sparkctl.checks.base import REGISTRY, Context
from sparkctl.checks.doctor import run_checks
from sparkctl.facts import docker, system
from sparkctl.steps.base import RunContext
from sparkctl.steps.images import ImagesStep
from sparkctl.steps.runtime import RuntimeStep
from sparkctl.transport import image_identity, registry
from sparkctl.transport.images import loaded_id

INV = inventory()
IMAGE = INV.runtime.image
HOSTS = ("head", "worker", "offload")
GOOD = image_identity.identity_of_inspect(CLASSIC)
MIXED = {"head": CLASSIC, "worker": CONTAINERD, "offload": CLASSIC}  # one node on containerd's store


def up_registry():
    return functools.partial(registry.resolve, transport=recorded(https_works=False))


def down_registry(ref, **kw):
    raise registry.RegistryUnreachable(f"registry of {ref}: connection refused")


def facts(docs: dict, applied: dict | None = None, containers: dict | None = None, health: str = "HTTP/1.1 200 OK"):
    out = {}
    for h in HOSTS:
        secs = {"image__0": inspect_section(docs.get(h), IMAGE)}
        if containers is not None:
            secs["containers"] = sec(json.dumps([container_json(h, WANT[h], image_id=containers[h])]))
        if h == "head":
            secs["health"] = sec(health)
            if applied is not None:
                secs["applied"] = sec(json.dumps(applied))
        out[h] = host_facts(INV, h, **secs)
    return out


def record(images: dict) -> dict:
    """applied.json as the record step writes it (images: what each node's verify put in the outputs)."""
    return {"config_hash": "x", "applied_at": "2026-12-01T00:00:00Z", "inventory": INV.model_dump(mode="json"),
            "images": {h: {IMAGE: i} for h, i in images.items()}}  # fmt: skip


def images_same(docs: dict, applied: dict | None = None) -> dict:
    ctx = Context(inventory=INV, hosts=list(HOSTS), facts=facts(docs, applied))
    return {r.host: r for r in run_checks(ctx, [REGISTRY["images.same"]])}


# identity


def test_one_image_has_a_docker_id_per_store_and_one_identity_the_registry_agrees_with():
    seen = {name: docker.parse_image(IMAGE, 0, inspect_section(doc, IMAGE).out)
            for name, doc in (("classic", CLASSIC), ("containerd", CONTAINERD), ("containerd 26", CONTAINERD_26))}  # fmt: skip
    assert seen["classic"].id == CLASSIC["Id"] != seen["containerd"].id == CONTAINERD["Id"]  # config vs manifest digest
    assert [f.store for f in seen.values()] == ["classic", "containerd", "containerd"]
    assert {f.identity for f in seen.values()} == {GOOD}
    assert registry.resolve(IMAGE, insecure=True, transport=recorded(https_works=False)).identity == GOOD


def test_identity_follows_what_the_container_would_run_not_metadata():
    other_env = copy.deepcopy(CLASSIC)
    other_env["Config"]["Env"] = [*other_env["Config"]["Env"], "VLLM_USE_V1=0"]
    later = {**CLASSIC, "Created": "2027-01-01T00:00:00Z", "Metadata": {"LastTagTime": "2027-01-01T00:00:00Z"}}
    assert image_identity.identity_of_inspect(other_env) != GOOD  # another run config: another image
    assert image_identity.identity_of_inspect(rebuilt(CLASSIC)) != GOOD  # another layer
    assert image_identity.identity_of_inspect(later) == GOOD  # only the dates differ


# doctor: images.same


def test_a_mixed_cluster_holding_one_image_passes_images_same():
    r = images_same(MIXED)
    assert {h: x.status for h, x in r.items()} == {"head": "ok", "worker": "ok", "offload": "ok"}
    assert "docker IDs differ with the image store" in r["worker"].message
    assert f"worker containerd {image_identity.short(CONTAINERD['Id'])}" in r["worker"].message
    r = images_same(MIXED, record({h: GOOD for h in HOSTS}))  # the record `up` writes
    assert {x.status for x in r.values()} == {"ok"} and "last verified by `sparkctl up`" in r["worker"].message


def test_a_containerd_node_holding_another_image_is_the_one_named():
    r = images_same({**MIXED, "worker": rebuilt(CONTAINERD)}, record({h: GOOD for h in HOSTS}))
    assert (r["head"].status, r["worker"].status, r["offload"].status) == ("ok", "failed", "ok")
    assert "worker would run different code" in r["worker"].message
    assert f"`docker save {CLASSIC['Id']} | ssh worker docker load`" in r["worker"].fix  # the source's own ID


def test_a_record_from_before_identities_still_proves_the_classic_nodes():
    old = record({h: CLASSIC["Id"] for h in ("head", "offload")})  # sparkctl recorded docker IDs then
    r = images_same({h: CLASSIC for h in HOSTS}, old)
    assert {x.status for x in r.values()} == {"ok"}


# up: the images step


def test_up_on_a_mixed_cluster_finds_every_node_current_in_the_registry_and_verifies_it():
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(MIXED))
    step = ImagesStep(up_registry())
    plans = step.plan(ctx)
    assert all(p.empty and not p.blocked for p in plans.values()), {h: p.reason for h, p in plans.items()}
    assert "already current in the registry" in plans["worker"].reason
    assert "image matches the registry's" in step.verify(ctx, "worker", changed=False)
    assert ctx.outputs.image_ids["worker"] == {IMAGE: GOOD} == ctx.outputs.image_ids["head"]


def test_registry_down_a_record_made_on_classic_nodes_proves_a_containerd_node_and_a_copy_uses_the_sources_id():
    applied = record({h: GOOD for h in HOSTS})
    ctx = RunContext(inventory=INV, fleet=None, facts=facts({**MIXED, "offload": None}, applied))
    plans = ImagesStep(down_registry).plan(ctx)
    assert plans["worker"].empty and "as last verified" in plans["worker"].reason
    (c,) = plans["offload"].changes  # missing: filled from a verified node
    assert c.action == "copy" and c.data["want"] == GOOD
    assert c.data["source_id"] == MIXED[c.data["source"]]["Id"]  # `docker save` on the source takes its own ID


# up: the runtime's drift


def test_a_container_on_the_containerd_store_running_the_tagged_image_is_left_running():
    running = {h: MIXED[h]["Id"] for h in HOSTS}  # a container's Image: its node's docker ID for the image
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(MIXED, containers=running), check_mode=True)
    ImagesStep(up_registry()).plan(ctx)
    plans = RuntimeStep().plan(ctx)
    assert all(p.empty for p in plans.values()), {h: p.reason for h, p in plans.items()}


def test_a_containerd_node_whose_tag_moved_restarts():
    running = {h: MIXED[h]["Id"] for h in HOSTS}
    moved = {**MIXED, "worker": rebuilt(CONTAINERD)}
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(moved, containers=running), check_mode=True)
    ImagesStep(down_registry).plan(ctx)  # nothing to verify against: the nodes' images are what they are
    reason = RuntimeStep().plan(ctx)["head"].reason
    assert f"sparkctl-worker on worker runs image {image_identity.short(CONTAINERD['Id'])}" in reason


# side-load: what `docker load` says it loaded


def test_the_loaded_image_id_is_read_from_either_stores_load_output():
    # moby daemon/internal/image/tarexport/load.go (classic) and daemon/containerd/image_exporter.go
    assert loaded_id(f"Loaded image ID: {CLASSIC['Id']}\n") == CLASSIC["Id"]
    assert loaded_id(f"Loaded image ID: {CONTAINERD['Id']}\n") == CONTAINERD["Id"]
    assert loaded_id(f"Loaded image: {IMAGE}\n") is None  # a tagged load names no ID


# item 6: the disk the image store is on

GIB = 1 << 30
DF_HEAD = "Filesystem         1-blocks        Used   Available Capacity Mounted on"


def df(device: str, mount: str, free_gib: float, size_gib: int = 1800) -> str:
    size, avail = size_gib * GIB, int(free_gib * GIB)
    return f"{DF_HEAD}\n{device} {size} {size - avail} {avail} {100 * (size - avail) // size}% {mount}\n"


def containerd_probe(docker_root: str, docker_df: str, containerd_df: str, caches_df: str) -> str:
    c = json.loads((REC / "containerd-info.json").read_text())
    info = {**c["info"], "DockerRootDir": docker_root}
    return (f"@@info {json.dumps(info)}\n@@containerd-info {json.dumps(c['containerd'])}\n@@docker {docker_root}\n{docker_df}"
            f"@@containerd /var/lib/containerd\n{containerd_df}@@caches /var/lib/sparkctl\n{caches_df}")  # fmt: skip


def disk(out: str) -> dict:
    f = {"head": host_facts(INV, "head", disk=sec(out))}
    return {r.target: r for r in run_checks(Context(inventory=INV, hosts=["head"], facts=f), [REGISTRY["host.disk"]])}


def test_the_classic_store_keeps_images_under_dockers_data_root():
    out = json.loads((REC / "classic-disk-probe.json").read_text())["out"]  # recorded on the lab's head
    d = system.parse_disk(out)
    assert (d.image_store, d.images_root) == ("classic", "/var/lib/sparkctl-lab/hosts/head/docker")
    r = disk(out)
    assert set(r) == {"docker", "caches"} and "docker data root /var/lib/sparkctl-lab/hosts/head/docker" in r["docker"].message


def test_a_containerd_store_spark_with_one_filesystem_is_judged_once_as_the_image_store():
    nvme = df("/dev/nvme0n1p2", "/", 900)
    r = disk(containerd_probe("/var/lib/docker", nvme, nvme, nvme))
    assert set(r) == {"images", "caches"} and r["images"].status == "ok"
    assert "containerd image store /var/lib/containerd" in r["images"].message


def test_docker_moved_to_a_big_disk_but_containerd_full_on_the_root_fails_on_containerds_root():
    # data-root moved to /data: under containerd's store the images still go to /var/lib/containerd
    r = disk(containerd_probe("/data/docker", df("/dev/nvme1n1", "/data", 3500, 3700), df("/dev/nvme0n1p2", "/", 5),
                              df("/dev/nvme0n1p2", "/", 5)))  # fmt: skip
    assert (
        r["images"].status == "failed" and "5.0 GiB free on / (containerd image store /var/lib/containerd)" in r["images"].message
    )
    assert r["docker"].status == "ok" and "/data" in r["docker"].message


def test_dockerds_own_containerd_keeps_images_under_the_data_root():
    info = {"DockerRootDir": "/var/lib/docker", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
            "Containerd": {"Address": "/var/run/docker/containerd/containerd.sock"}}  # fmt: skip
    assert image_identity.images_root(info, "/var/lib/docker", "/var/lib/containerd") == (
        "containerd",
        "/var/lib/docker/containerd/daemon",
    )  # moby daemon/command/daemon.go containerdRootDir


# issue 24 item 6: an image on a registry the network fence refuses


def test_up_check_with_an_image_on_a_fenced_off_registry_is_bad_input_in_one_json_document(tmp_path):
    import os

    import yaml
    from controlfiles import usable_here
    from hostfacts import ROOT

    doc = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    doc["runtime"]["image"] = "192.0.2.7:5000/sparkctl/vllm-sim:0.1"  # TEST-NET-1: outside the fence, never contacted
    for i, h in enumerate(doc["hosts"].values()):
        h["ssh"] = {"address": f"127.0.0.{50 + i}", "port": 1}  # nothing listens: the run must not get that far anyway
    inv = tmp_path / "fenced.yaml"
    inv.write_text(yaml.safe_dump(usable_here(doc, tmp_path)))
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
    r = clirun.sparkctl(["up", "--check", "--json", "-i", str(inv)], env=env, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "Exception in thread" not in r.stderr
    err = json.loads(r.stdout)  # exactly one document
    assert err["error"].startswith("runtime.image 192.0.2.7:5000/sparkctl/vllm-sim:0.1: refusing to contact 192.0.2.7")
    assert "the registry 192.0.2.7:5000" in err["error"] and "SPARKCTL_ONLY_NETWORKS" in err["fix"]


def test_a_config_blob_redirected_outside_the_fence_is_refused_before_it_is_asked(monkeypatch):
    import httpx
    import pytest

    from sparkctl.errors import InputError

    monkeypatch.setenv("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")
    replay, asked = recorded(https_works=False), []

    def handler(request):
        asked.append(request.url.host)
        if "/blobs/" in request.url.path:  # what registries backed by object storage answer
            return httpx.Response(307, headers={"location": "http://203.0.113.9/bucket/blob"})
        return replay.handle_request(request)

    with pytest.raises(InputError) as exc:
        registry.resolve(IMAGE, insecure=True, transport=httpx.MockTransport(handler))
    assert "refusing to contact 203.0.113.9" in exc.value.message and "203.0.113.9" not in asked
