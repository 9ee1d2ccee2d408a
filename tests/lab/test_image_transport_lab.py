"""Image transport between the lab's real dockerds (20.10): only missing layers move, the image ID
is verified, the fabric path is used when the head can SSH to the worker's rail, and an
interrupted copy leaves the tag where it was."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

from sparkctl.errors import HostError
from sparkctl.inventory.loader import load_inventory
from sparkctl.transport.images import copy_image, stored_image
from sparkctl.transport.ssh import Fleet
from sparkctl_lab import shaping

pytestmark = pytest.mark.lab

NAME = "sparkctl-test/transport"
BASE, FULL, BIG = f"{NAME}:base", f"{NAME}:full", f"{NAME}:big"
LAYER_MB = 2
WORKER_RAIL = ("10.231.100.3", "enp1s0f0np0")  # the worker's address and device on the head's first rail


def build(session) -> None:
    """On the head: BASE = 3 random layers, FULL = BASE + 1 random top layer, BIG = one 100 MB layer."""
    script = f"""set -e; d=$(mktemp -d); cd $d
for i in 1 2 3 4; do head -c {LAYER_MB}000000 /dev/urandom > b$i; done
printf 'FROM scratch\\nCOPY b1 /b1\\nCOPY b2 /b2\\nCOPY b3 /b3\\n' > Dockerfile.base
printf 'FROM {BASE}\\nCOPY b4 /b4\\n' > Dockerfile
DOCKER_BUILDKIT=0 docker build -q -f Dockerfile.base -t {BASE} . >/dev/null 2>&1
DOCKER_BUILDKIT=0 docker build -q -t {FULL} . >/dev/null 2>&1
head -c 100000000 /dev/urandom > big; tar cf big.tar big; docker import big.tar {BIG} >/dev/null
cd /; rm -rf $d"""
    session.run(["sh", "-c", script], timeout=300).check("build the test images")


def remove(session) -> None:
    session.run(f"docker rmi -f {BASE} {FULL} {BIG} >/dev/null 2>&1; docker image prune -f >/dev/null 2>&1")


@pytest.fixture(scope="module")
def fleet(lab):
    with Fleet(load_inventory(lab.INVENTORY_PATH), hosts=["head", "worker"]) as f:
        for s in f.sessions.values():
            remove(s)
        build(f["head"])
        yield f
        for s in f.sessions.values():
            remove(s)


@pytest.fixture
def head(fleet):
    return fleet["head"]


@pytest.fixture
def worker(fleet):
    remove(fleet["worker"])
    return fleet["worker"]


def rx_bytes(session, device: str) -> int:
    return int(session.run(f"cat /sys/class/net/{device}/statistics/rx_bytes").check().stdout)


def test_fresh_node_receives_the_whole_image_over_the_fabric_and_its_id_matches(head, worker):
    want = stored_image(head, FULL)
    seen = []
    before = rx_bytes(worker, WORKER_RAIL[1])
    t = copy_image(head, worker, want.id, FULL, fabric_address=WORKER_RAIL[0], progress=seen.append)
    moved = rx_bytes(worker, WORKER_RAIL[1]) - before
    assert t.path == "fabric", t.why
    assert stored_image(worker, FULL).id == want.id
    assert (t.layers_sent, t.layers_skipped) == (4, 0)
    assert moved >= 4 * LAYER_MB * 10**6  # the four layers crossed the worker's rail
    assert seen and seen[-1].sent == t.bytes_sent and seen[-1].total == 4 * LAYER_MB * 10**6


def test_a_worker_missing_only_the_top_layer_receives_only_that_layer(head, worker):
    copy_image(head, worker, stored_image(head, BASE).id, BASE, fabric_address=WORKER_RAIL[0])
    want = stored_image(head, FULL)
    before = rx_bytes(worker, WORKER_RAIL[1])
    t = copy_image(head, worker, want.id, FULL, fabric_address=WORKER_RAIL[0])
    moved = rx_bytes(worker, WORKER_RAIL[1]) - before
    assert stored_image(worker, FULL).id == want.id
    assert (t.layers_sent, t.layers_skipped) == (1, 3)
    layer = LAYER_MB * 10**6
    assert layer <= t.bytes_sent < layer + 64 * 1024  # the layer's tar and a few KiB of metadata
    assert layer <= moved < 1.5 * layer  # what the rail carried: one layer (+ SSH framing), not four


def test_relay_through_this_machine_when_no_fabric_address(head, worker):
    want = stored_image(head, FULL)
    t = copy_image(head, worker, want.id, FULL)
    assert t.path == "relay"
    assert stored_image(worker, FULL).id == want.id
    again = copy_image(head, worker, want.id, FULL)
    assert again.path == "none" and again.bytes_sent == 0


@contextmanager
def slow_rail(session, device: str, rate: str = "80mbit"):
    """The rail's egress on `session`'s host shaped to `rate` (a busy or degraded link): the copy
    below takes seconds, so the interrupt lands mid-stream on any machine."""
    session.run(f"tc qdisc replace dev {device} root tbf rate {rate} burst 256kb latency 200ms").check("shape the rail")
    try:
        yield
    finally:  # back at the lab's line rate
        session.run(f"tc qdisc replace dev {device} root {' '.join(shaping.tbf())}")


def test_an_interrupted_copy_leaves_the_tag_on_the_image_it_had(head, worker):
    old = stored_image(head, BASE).id
    copy_image(head, worker, old, BIG, fabric_address=WORKER_RAIL[0])  # BIG on the worker is some other image
    big = stored_image(head, BIG).id

    def interrupt(p):
        if p.total and p.sent < p.total:
            raise KeyboardInterrupt

    with slow_rail(head, WORKER_RAIL[1]):  # 100 MB at 10 MB/s: the first progress line comes long before the end
        with pytest.raises(KeyboardInterrupt):
            copy_image(head, worker, big, BIG, fabric_address=WORKER_RAIL[0], progress=interrupt)
        stopped = time.monotonic() + 10  # the watchdog on the head kills the pipeline when the channel closes
        while head.run(f"pgrep -f 'docker [s]ave {big}'").ok and time.monotonic() < stopped:
            time.sleep(0.2)
        assert not head.run(f"pgrep -f 'docker [s]ave {big}'").ok
        assert not head.run(f"pgrep -f '[s]sh .*{WORKER_RAIL[0]} docker load'").ok
    time.sleep(1)
    assert stored_image(worker, BIG).id == old  # the tag never moved to a partial image
    assert stored_image(worker, big) is None  # and nothing of the cut image is left as an image
    again = copy_image(head, worker, big, BIG, fabric_address=WORKER_RAIL[0])  # and a new run copies it whole
    assert again.path == "fabric" and stored_image(worker, BIG).id == big


def test_copy_refuses_a_source_without_the_image(head, worker):
    with pytest.raises(HostError, match="does not hold image"):
        copy_image(worker, head, stored_image(head, FULL).id, FULL)


def test_relay_when_the_source_cannot_ssh_to_the_destination_rail(head, worker):
    # the head does not know the worker's host key: its ssh refuses (never auto-adds), the copy is relayed
    head.run("mv /root/.ssh/known_hosts /root/.ssh/known_hosts.off").check()
    try:
        want = stored_image(head, FULL)
        t = copy_image(head, worker, want.id, FULL, fabric_address=WORKER_RAIL[0])
    finally:
        head.run("mv /root/.ssh/known_hosts.off /root/.ssh/known_hosts").check()
    assert t.path == "relay" and "head cannot SSH to 10.231.100.3" in t.why
    assert "Host key verification failed" in t.why
    assert stored_image(worker, FULL).id == want.id
