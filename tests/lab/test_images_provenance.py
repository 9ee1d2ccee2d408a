"""Issue 14's scenario on the lab: the registry stopped and the head's image rebuilt by hand under
the runtime's tag. `up` must name the head as drifted (the ID it has, the ID it should have), copy
nothing anywhere and exit 1; doctor names the head, not its peers; with the registry back, `up`
restores the registry's image on the head."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from labcli import run

pytestmark = pytest.mark.lab

ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}
HOSTS = ("head", "worker", "offload")


def sparkctl(*args: str) -> tuple[int, dict]:
    p = run([*args, "--json"], env=ENV)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def image_id(lab, host: str) -> str:
    return lab.host_exec(host, ["docker", "image", "inspect", "-f", "{{.Id}}", lab.IMAGE], check=True).stdout.strip()


def shown(lab, host: str) -> str:
    """How sparkctl names the image the host holds under the tag: its identity's 12 hex digits."""
    from sparkctl.transport.image_identity import identity_of_inspect, short

    out = lab.host_exec(host, ["docker", "image", "inspect", lab.IMAGE], check=True).stdout
    return short(identity_of_inspect(json.loads(out)[0]))


def registry_stop() -> None:
    from sparkctl_lab import procs

    pid = procs.registry_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        procs.wait_gone([pid], 10)


def registry_start() -> None:
    from sparkctl_lab import procs, registry

    if procs.registry_pid() is None:
        procs.start_registry()
    deadline = time.monotonic() + 20
    while not registry.healthy() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert registry.healthy()


@pytest.fixture
def drifted_head(lab):
    """A converged cluster (applied.json records every node's verified image), then the registry
    stopped and a hand-built image under the runtime's tag on the head."""
    inv = str(lab.INVENTORY_PATH)
    rc, doc = sparkctl("up", "-i", inv)
    assert rc == 0, json.dumps(doc, indent=1)[-3000:]
    good = image_id(lab, "head")
    assert all(image_id(lab, h) == good for h in HOSTS)
    registry_stop()
    script = (f"set -e; d=$(mktemp -d); cd $d; echo 'a hand-made change' > CHANGED; "
              f"printf 'FROM {lab.IMAGE}\\nCOPY CHANGED /CHANGED\\n' > Dockerfile; "
              f"DOCKER_BUILDKIT=0 docker build -q -t {lab.IMAGE} . >/dev/null 2>&1; cd /; rm -rf $d")  # fmt: skip
    lab.host_exec("head", ["sh", "-c", script], check=True, timeout=120)
    hand = image_id(lab, "head")
    assert hand != good
    try:
        yield inv, good, hand
    finally:
        registry_start()
        lab.host_exec("head", ["docker", "tag", good, lab.IMAGE])
        lab.host_exec("head", ["docker", "rmi", hand])


def test_registry_down_and_a_hand_built_head_image_stop_up_naming_the_head_and_nothing_is_copied(lab, drifted_head):
    inv, good, hand = drifted_head
    rc, doc = sparkctl("up", "-i", inv)
    assert rc == 1
    images = {r["host"]: r for r in doc["results"] if r["step"] == "images"}
    assert images["head"]["status"] == "failed"
    msg = images["head"]["message"]
    assert msg.startswith(f"head: {lab.IMAGE} drift: holds {shown(lab, 'head')}, should hold {shown(lab, 'worker')}")
    assert "last good in applied.json" in msg and "registry" in msg
    assert f"neither head's dockerd nor this machine reached the registry {lab.REGISTRY}" in msg  # both were asked
    assert f"rerun `sparkctl up` (head pulls {lab.IMAGE})" in msg and "--side-load" in msg  # the exact fix
    assert images["worker"]["status"] == images["offload"]["status"] == "skipped"
    assert not [r for r in doc["results"] if r["status"] == "changed"]
    assert (image_id(lab, "head"), image_id(lab, "worker"), image_id(lab, "offload")) == (hand, good, good)

    rc, checks = sparkctl("doctor", "-i", inv, "--only", "images")
    assert rc == 1
    failing = {(c["name"], c["host"]) for c in checks["checks"] if c["status"] == "failed"}
    assert failing == {("images.same", "head")}

    registry_start()
    rc, doc = sparkctl("up", "-i", inv)
    assert rc == 0, json.dumps(doc, indent=1)[-3000:]
    head = next(r for r in doc["results"] if r["step"] == "images" and r["host"] == "head")
    assert head["status"] == "changed" and f"pulled {lab.IMAGE} ({shown(lab, 'worker')})" in head["message"]
    assert all(image_id(lab, h) == good for h in HOSTS)


def test_a_digest_pin_pulls_by_digest_and_tags_the_image(lab, tmp_path):
    import yaml

    from sparkctl_lab import registry

    registry_start()
    inv = str(lab.INVENTORY_PATH)
    rc, doc = sparkctl("up", "-i", inv)
    assert rc == 0, json.dumps(doc, indent=1)[-3000:]
    good, good_shown = image_id(lab, "offload"), shown(lab, "offload")
    pinned = yaml.safe_load(open(inv).read())
    pinned["runtime"]["image_digest"] = registry.manifest()["_digest"]
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(pinned))
    lab.host_exec("offload", ["docker", "rmi", "-f", lab.IMAGE], check=True)  # untags (its container keeps the image)
    try:
        rc, doc = sparkctl("up", "-i", str(path))
        assert rc == 0, json.dumps(doc, indent=1)[-3000:]
        offload = next(r for r in doc["results"] if r["step"] == "images" and r["host"] == "offload")
        name = lab.IMAGE.rsplit(":", 1)[0]
        assert f"pull {name}@{pinned['runtime']['image_digest']} (missing; pinned manifest" in offload["changes"][0]
        assert "from head's dockerd" in offload["changes"][0]  # the pin checked where the pull happens
        # the pull itself tagged it (not the planned fallback copy from a peer)
        assert f"pulled {name}@{pinned['runtime']['image_digest']} ({good_shown})" in offload["message"]
        assert "pull failed" not in offload["message"]
        assert image_id(lab, "offload") == good
    finally:
        lab.host_exec("offload", ["docker", "tag", good, lab.IMAGE])
