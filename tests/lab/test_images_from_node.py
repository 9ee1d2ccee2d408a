"""Issue 40 item 3 on the lab: `up --check` plans the image from the registry's answer to the head's
dockerd (asked over the run's SSH connection), not from the control machine's. Here the control
machine cannot reach the registry: its connections to the registry's address are refused in the
root namespace, where sparkctl runs (an iptables OUTPUT rule: the lab hosts' own connections come in
over the management bridge and are not touched), as on a laptop without the registry's network.
`up` then does exactly what --check listed. A registry nobody reaches is said to be so, with both
reasons and the fix."""

from __future__ import annotations

import subprocess

import httpx
import pytest
from labcli import sparkctl, variant

pytestmark = pytest.mark.lab


def image_id(lab, host: str) -> str:
    return lab.host_exec(host, ["docker", "image", "inspect", "-f", "{{.Id}}", lab.IMAGE], check=True).stdout.strip()


def operations(doc: dict) -> dict:
    return {(r["host"], r["step"]): r["operations"] for r in doc["results"] if r["operations"]}


@pytest.fixture
def registry_cut_off(lab):
    """This machine's connections to the lab registry refused (a TCP reset), the hosts' left alone."""
    address, port = lab.REGISTRY.rsplit(":", 1)
    rule = ["OUTPUT", "-d", address, "-p", "tcp", "--dport", port, "-m", "comment", "--comment",
            "sparkctl-lab-test: control machine without the registry", "-j", "REJECT", "--reject-with", "tcp-reset"]  # fmt: skip
    subprocess.run(["iptables", "-I", *rule], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True, timeout=30)


@pytest.fixture
def converged(lab):
    sparkctl("up", "-i", str(lab.INVENTORY_PATH))
    good = image_id(lab, "head")
    yield good
    if lab.host_exec("worker", ["docker", "image", "inspect", lab.IMAGE]).returncode != 0:
        lab.host_exec("worker", ["docker", "tag", good, lab.IMAGE], check=True)


def test_check_plans_the_pull_from_the_heads_dockerd_when_this_machine_cannot_reach_the_registry(
    lab, converged, registry_cut_off
):
    inv = str(lab.INVENTORY_PATH)
    with pytest.raises(httpx.TransportError):  # this machine: no registry
        httpx.get(f"http://{lab.REGISTRY}/v2/", timeout=5)
    assert lab.host_exec("head", ["docker", "pull", "-q", lab.IMAGE], timeout=120).returncode == 0  # the nodes: as ever
    lab.host_exec("worker", ["docker", "rmi", "-f", lab.IMAGE], check=True)  # untagged (its container keeps the image)

    check = sparkctl("up", "-i", inv, "--check")
    images = {r["host"]: r for r in check["results"] if r["step"] == "images"}
    assert images["worker"]["operations"] == ["pull"], images["worker"]
    (planned,) = images["worker"]["changes"]
    assert planned.startswith(f"pull {lab.IMAGE} (missing; tag = manifest "), planned
    assert ", from head's dockerd)" in planned and "copy from" in planned  # the fallback, if the pull failed
    assert "already current in the registry" in images["head"]["message"] and "from head's dockerd" in images["head"]["message"]
    assert images["offload"]["operations"] == []

    run = sparkctl("up", "-i", inv)
    assert operations(run) == operations(check)  # --check is exact
    worker = next(r for r in run["results"] if r["step"] == "images" and r["host"] == "worker")
    assert worker["status"] == "changed" and f"pulled {lab.IMAGE}" in worker["message"] and "pull failed" not in worker["message"]
    assert image_id(lab, "worker") == converged


def test_a_moved_tag_no_node_holds_is_pulled_everywhere_and_the_engine_restarts_as_check_said(lab, converged, registry_cut_off):
    """The tag moved to an image no node holds, and this machine cannot read its config: --check
    plans the pull on every node and the restart of what runs the old image; `up` does exactly that
    and proves each node's image by the manifest docker recorded pulling it."""
    inv, image, good = str(lab.INVENTORY_PATH), lab.IMAGE, converged
    build = (f"printf 'FROM {image}\\nLABEL io.sparkctl.test=moved-tag\\n' | docker build -q -t {image} - >/dev/null && "
             f"docker push -q {image} >/dev/null && docker image inspect -f '{{{{.Id}}}}' {image} && docker tag {good} {image}")  # fmt: skip
    moved = lab.host_exec("offload", ["sh", "-c", build], check=True, timeout=300).stdout.strip()
    lab.host_exec("offload", ["docker", "rmi", moved], check=True)  # pushed from there, then gone: no node holds it
    try:
        check = sparkctl("up", "-i", inv, "--check")
        images = {r["host"]: r for r in check["results"] if r["step"] == "images"}
        for h in ("head", "worker", "offload"):
            assert images[h]["operations"] == ["pull"], images[h]
            assert "no node holds it yet: the pull tells what it is" in images[h]["changes"][0]
        assert ("head", "runtime") in operations(check)  # restarts on what the pull brings

        run = sparkctl("up", "-i", inv)
        assert operations(run) == operations(check)  # --check is exact
        verified = [r["message"] for r in run["results"] if r["step"] == "images"]
        assert all("pulled as the registry's manifest" in m for m in verified), verified
        assert len({image_id(lab, h) for h in ("head", "worker", "offload")} - {good}) == 1  # one new image everywhere
    finally:  # the lab's image back under the tag, in the registry and on every node
        lab.host_exec("head", ["sh", "-c", f"docker tag {good} {image} && docker push -q {image} >/dev/null"], check=True)
        for h in ("worker", "offload"):
            lab.host_exec(h, ["docker", "pull", "-q", image], check=True, timeout=120)
        sparkctl("up", "-i", inv)


def test_a_registry_neither_the_head_nor_this_machine_reaches_is_named_with_the_fix(lab, converged, tmp_path):
    address = lab.REGISTRY.rsplit(":", 1)[0]
    image = f"{address}:5999/sparkctl/vllm-sim:0.1"  # nothing listens there: for the head and for this machine
    inv = variant(lab.INVENTORY_PATH, tmp_path, "dead-registry", runtime__image=image)
    doc = sparkctl("up", "-i", str(inv), "--check", rc=1)
    head = next(r for r in doc["results"] if r["step"] == "images" and r["host"] == "head")
    assert head["status"] == "failed"
    msg = head["message"]
    assert f"neither head's dockerd nor this machine reached the registry {address}:5999" in msg, msg
    assert f'(head\'s dockerd: Get "https://{address}:5999/v2/"' in msg and "connection refused" in msg.lower()
    assert f"`docker pull {image}` on head; `docker login` there for a private registry" in msg
