"""The fleet's front door (`python -m sparkctl.fleetdoor`), standalone on loopback: a real subprocess
in front of two members, each the lab's vLLM simulator (test_sim_serving.Server, a real `vllm serve`
subprocess) behind its own gateway (test_gateway.Gateway), with the OpenAI Python client at
max_retries=0 and the admin interface through `python -m sparkctl.fleetdoor.ctl`.

Which member served a request is read off the engines' own counters (vLLM's
`vllm:request_success_total`), never off the door's word alone. No assertion is a timing threshold
(benchmarks/fleet.py measures throughput).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_gateway import Gateway, restart
from test_sim_serving import NAME, Server

from sparkctl.fleetdoor.ctl import call
from sparkctl_lab.sim import harness

PROBE_S = "0.1"
HOLD_S = 2.0


class FleetDoor:
    """`python -m sparkctl.fleetdoor` on 127.0.0.1 in front of `members` (name -> (public, health))."""

    def __init__(self, tmp: str, members: dict[str, tuple[str, str]], *args: str):
        self.port = harness.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.socket = os.path.join(tmp, f"door-{self.port}", "admin.sock")
        argv = [sys.executable, "-m", "sparkctl.fleetdoor", "--listen", f"127.0.0.1:{self.port}",
                "--admin-socket", self.socket, "--probe-interval-s", PROBE_S, "--hold-s", str(HOLD_S), *args]  # fmt: skip
        for name, (public, health) in members.items():
            argv += ["--member", f"{name}={public},{health}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = harness.Proc("fleetdoor", argv, env, os.path.join(tmp, f"fleetdoor-{self.port}.log")).start()
        assert harness.wait_http(self.base + "/fleetdoor/metrics", timeout=30, proc=self.proc), self.proc.log()
        self.openai = openai.OpenAI(base_url=self.base + "/v1", api_key="none", max_retries=0, timeout=60)

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sparkctl.fleetdoor.ctl", "--admin-socket", self.socket, *args],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def status(self) -> dict:
        """The admin API's /status, read in this process with ctl's own client: the tests read it ~100
        times, and a `python -m sparkctl.fleetdoor.ctl status` each cost ~0.2 CPU-s (the CLI is
        asserted where a drain reads it: test_drain_moves_new_requests_off_and_waits_for_in_flight)."""
        code, doc = call(self.socket, "GET", "/status", None, 10)
        assert code == 200, doc
        return doc

    def wait_state(self, member: str, state: str, timeout: float = 30) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.status()
            if st["members"][member]["state"] == state:
                return st
            time.sleep(0.05)
        raise AssertionError(f"{member} never {state}: {st}")

    def metrics(self) -> dict[str, float]:
        out = {}
        for fam in text_string_to_metric_families(httpx.get(self.base + "/fleetdoor/metrics").text):
            for s in fam.samples:
                out[s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"] = s.value
        return out

    def stop(self) -> None:
        self.openai.close()
        self.proc.stop()


def served(sim: Server) -> float:
    """Requests the engine itself finished (its own counter)."""
    return sum(v for k, v in sim.metrics().items() if k.startswith("vllm:request_success_total"))


def running(sims: dict[str, Server]) -> dict[str, int]:
    """Requests each engine runs now (its own gauge)."""
    return {n: int(sum(v for k, v in s.metrics().items() if k.startswith("vllm:num_requests_running"))) for n, s in sims.items()}


def ask(door: FleetDoor, text: str, history: list | None = None, max_tokens: int = 4, timeout: float = 60) -> list:
    messages = [*(history or []), {"role": "user", "content": text}]
    r = door.openai.chat.completions.create(model=NAME, messages=messages, max_tokens=max_tokens, temperature=0, timeout=timeout)
    return [*messages, {"role": "assistant", "content": r.choices[0].message.content}]


def open_stream(door: FleetDoor, text: str, max_tokens: int = 30000):
    """A streaming chat request, read up to its first chunk: it is in flight at the door until closed."""
    s = door.openai.chat.completions.create(
        model=NAME,
        messages=[{"role": "user", "content": text}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},  # vLLM's sampling parameter: no natural end (the simulator's ends at 900-2200)
    )
    next(iter(s))
    return s


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two members, each a simulator behind its own gateway; the door reads each engine's /health."""
    tmp = str(tmp_path_factory.mktemp("fleetdoor"))
    # slow decode steps: an open stream runs about a minute; room for many at once
    env = {"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": "0.05"}
    sims = {n: Server(tmp, "--max-num-seqs", "16", env=env) for n in ("a", "b")}
    gws = {n: Gateway(tmp, s.base, "--hold-s", "30") for n, s in sims.items()}
    door = FleetDoor(tmp, {n: (gws[n].base, sims[n].base) for n in sims})
    yield door, sims, gws
    door.stop()
    for x in (*gws.values(), *sims.values()):
        x.stop()


def outstanding(door: FleetDoor) -> dict[str, int]:
    return {n: m["outstanding"] for n, m in door.status()["members"].items()}


def closed(streams) -> None:
    for s in streams:
        s.close()


def wait_idle(door: FleetDoor) -> None:
    end = time.monotonic() + 30
    while sum(outstanding(door).values()) and time.monotonic() < end:
        time.sleep(0.05)


def outstanding_and_running(door: FleetDoor, sims: dict[str, Server]) -> tuple[dict[str, int], dict[str, int]]:
    """What the door has in flight per member, and what the engines run once their gauges show it:
    an engine publishes vllm:num_requests_running after its step, so a read at the same instant can
    lag the door by a stream (a floors run: {'a': 4, 'b': 3} against the door's 5 and 3)."""
    out = outstanding(door)
    end = time.monotonic() + 10
    while (engines := running(sims)) != out and time.monotonic() < end:
        time.sleep(0.05)
    return out, engines


def test_streams_go_where_fewest_are_outstanding(fleet):
    """Streams with different prompts spread over both members by what is in flight; a crowd of
    one conversation's requests stays on its member only until that member clearly has more."""
    door, sims, _ = fleet
    streams = [open_stream(door, f"tell story number {i}") for i in range(8)]
    out, engines = outstanding_and_running(door, sims)
    closed(streams)
    assert sum(out.values()) == 8 and max(out.values()) - min(out.values()) <= 3, out
    assert engines == out  # the engines run what the door says it sent them
    wait_idle(door)
    streams = [open_stream(door, "one shared conversation") for _ in range(8)]
    out, engines = outstanding_and_running(door, sims)
    closed(streams)
    assert sorted(out.values()) == [3, 5], out  # slack 2: 4:2, then 5:3 (the affine member keeps 2 more)
    assert engines == out
    wait_idle(door)


def which(door: FleetDoor, fn) -> str:
    """The one member whose engine finished the request that fn sends."""
    before = {n: m["requests"] for n, m in door.status()["members"].items()}
    fn()
    after = {n: m["requests"] for n, m in door.status()["members"].items()}
    moved = [n for n in after if after[n] != before[n]]
    assert len(moved) == 1, (before, after)
    return moved[0]


def test_a_conversation_stays_on_one_member(fleet):
    door, sims, _ = fleet
    wait_idle(door)
    before = {n: served(s) for n, s in sims.items()}
    where: dict[str, set[str]] = {}
    for c in range(6):
        history: list = [{"role": "system", "content": "You are terse."}]
        for turn in range(3):

            def send(history=history, turn=turn, c=c):
                history[:] = ask(door, f"conversation {c}, question {turn}", history)

            where.setdefault(f"conversation {c}", set()).add(which(door, send))
    assert all(len(members) == 1 for members in where.values()), where  # every follow-up on its first member
    assert {m for ms in where.values() for m in ms} == {"a", "b"}, where  # and the conversations spread
    counts = {n: served(s) - before[n] for n, s in sims.items()}
    on = {n: 3 * sum(1 for ms in where.values() if n in ms) for n in sims}
    assert counts == on, (counts, on)  # the engines finished exactly the turns the door sent them


def test_drain_moves_new_requests_off_and_waits_for_in_flight(fleet):
    door, sims, _ = fleet
    wait_idle(door)
    stream = open_stream(door, "a long answer on a")
    member = next(n for n, k in outstanding(door).items() if k == 1)
    other = "b" if member == "a" else "a"
    # a drain with no time to wait fails, naming what is still in flight (the member stays drained)
    r = door.ctl("drain", member, "--wait-s", "0.2")
    assert r.returncode == 1 and "1 request(s) are still in flight" in r.stderr, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["members"][member]["state"] == "drained"
    result: dict = {}
    drain = threading.Thread(target=lambda: result.update(r=door.ctl("drain", member, "--wait-s", "60")))
    drain.start()
    time.sleep(0.3)
    assert drain.is_alive(), result  # it waits for the stream
    for c in range(6):  # conversations of both members before: all on the other one now
        assert (
            which(door, lambda c=c: ask(door, f"conversation {c}, question 0", [{"role": "system", "content": "You are terse."}]))
            == other
        )
    stream.close()
    drain.join(30)
    assert result["r"].returncode == 0, result["r"].stderr
    doc = json.loads(result["r"].stdout)
    assert doc["drained"] == member and doc["members"][member]["outstanding"] == 0
    r = door.ctl("status")  # the operator's view: the same document
    assert r.returncode == 0 and json.loads(r.stdout)["eligible"] == [other], r.stderr
    r = door.ctl("undrain", member)
    assert r.returncode == 0 and json.loads(r.stdout)["members"][member]["state"] == "passing", r.stderr
    homes = {
        which(door, lambda c=c: ask(door, f"conversation {c}, question 0", [{"role": "system", "content": "You are terse."}]))
        for c in range(6)
    }
    assert homes == {"a", "b"}  # its conversations come back to it


def test_a_member_whose_gateway_holds_is_skipped(fleet):
    door, sims, gws = fleet
    wait_idle(door)
    gws["a"].hold(reason="reload")
    try:
        st = door.wait_state("a", "holding")
        assert "its gateway holds (admin)" in st["members"]["a"]["reason"]
        for c in range(6):
            assert (
                which(
                    door,
                    lambda c=c: ask(door, f"conversation {c}, question 0", [{"role": "system", "content": "You are terse."}]),
                )
                == "b"
            )
    finally:
        gws["a"].release()
    door.wait_state("a", "passing")


def test_no_member_eligible_is_held_briefly_then_503(fleet):
    door, sims, _ = fleet
    for n in sims:
        assert door.ctl("drain", n, "--wait-s", "30").returncode == 0
    try:
        t0 = time.monotonic()
        with pytest.raises(openai.InternalServerError) as e:
            ask(door, "anyone there?")
        assert time.monotonic() - t0 >= HOLD_S * 0.9  # held first (a bound the door keeps, not a timing claim)
        assert e.value.status_code == 503 and e.value.response.headers["Retry-After"] == "2"
        err = e.value.response.json()["error"]
        assert err["type"] == "ServiceUnavailableError" and "a drained, b drained" in err["message"], err
        # a member that comes back within the hold takes the held request
        result: dict = {}
        received = door.metrics()["sparkctl_fleetdoor_requests_total{}"]
        t = threading.Thread(target=lambda: result.update(h=ask(door, "held, then served")))
        t.start()
        end = time.monotonic() + 10
        while door.metrics()["sparkctl_fleetdoor_requests_total{}"] == received and time.monotonic() < end:
            time.sleep(0.02)  # the request has reached the door, which holds it
        # straight on the admin socket (what `ctl undrain` sends): a ctl subprocess's start-up on a loaded
        # machine can outlast the 2 s hold
        assert call(door.socket, "POST", "/undrain", {"member": "b"}, 10)[0] == 200
        t.join(30)
        assert result["h"][-1]["role"] == "assistant"
    finally:
        for n in sims:
            door.ctl("undrain", n)


def test_a_dead_engine_is_absorbed_by_the_other_member(fleet):
    """SIGKILL one engine under load from 4 client threads: new requests go to the other member;
    none sent after the door saw it fail fails. Those that were waiting at its gateway (which
    holds them up to its hold_s, 30 s) are taken back and sent to the other member: no client
    times out at 20 s (a stream cut midway would fail once; these answers are not streamed)."""
    door, sims, gws = fleet
    wait_idle(door)
    stop = threading.Event()
    log: list[tuple[float, float, str]] = []  # (sent, done, outcome)

    def client(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                ask(door, f"load {i}.{n}", max_tokens=16, timeout=20)
                log.append((t0, time.monotonic(), "ok"))
            except openai.APIError as e:
                log.append((t0, time.monotonic(), repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        sims["a"].proc.signal(signal.SIGKILL)
        sims["a"].proc.wait(10)
        st = door.wait_state("a", "failing")
        seen = time.monotonic()
        before_b = served(sims["b"])
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    after = [x for x in log if x[0] > seen]
    failed = [x for x in after if x[2] != "ok"]
    assert len(after) >= 8 and not failed, (len(after), failed[:3], st)
    assert not [x for x in log if "Timeout" in x[2]], [x for x in log if x[2] != "ok"]
    assert served(sims["b"]) - before_b >= len(after)  # the other member's engine served them
    restart(sims["a"])
    door.wait_state("a", "passing")


def test_a_member_that_refuses_connections_is_absorbed(fleet):
    """SIGKILL one member's gateway (its public URL refuses connections) under load: requests that
    never reached it go to the other member. Only a request in flight through the killed gateway at
    that moment may fail (once per client at most); none sent after the kill does."""
    door, sims, gws = fleet
    wait_idle(door)
    stop = threading.Event()
    log: list[tuple[float, str]] = []  # (sent at, outcome)

    def client(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            sent = time.monotonic()
            try:
                ask(door, f"load {i}.{n}", max_tokens=2)
                log.append((sent, "ok"))
            except openai.APIError as e:
                log.append((sent, repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        g = gws["a"]
        killed = time.monotonic()
        g.proc.signal(signal.SIGKILL)
        g.proc.wait(10)
        st = door.wait_state("a", "failing")
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    failed = [(round(t - killed, 3), x) for t, x in log if x != "ok"]
    assert [x for _, x in log].count("ok") > 0 and len(failed) <= len(threads), failed
    assert [f for f in failed if f[0] > 0] == [], failed  # every failure was on its way before the kill
    m = door.metrics()
    # the door met a's death: a refused connection, a request of a's cut or taken back and sent to b
    # (the kill landing mid-request), or its own probe of a's public URL (every 0.1 s) before any
    # request was sent there; which comes first is the kill's timing and the machine's load
    met = sum(m[f"sparkctl_fleetdoor_member_errors_total{{kind={k},member=a}}"] for k in ("connect", "rescued", "cut"))
    assert met >= 1 or st["members"]["a"]["reason"].startswith("its public URL"), (m, st)
    g.proc = harness.Proc(g.proc.name, g.proc.argv, g.proc.env, g.proc.log_path).start()
    assert harness.wait_http(g.base + "/gateway/metrics", timeout=30, proc=g.proc)
    door.wait_state("a", "passing")


# ---- the admin API over SSH (sparkctl/fleet/door_admin.py) ----

DOCKER = """#!/bin/sh
# docker exec NAME python3 ARGS... -> python ARGS... on this machine, for the door whose socket is {socket}
if [ "$1" != exec ] || [ "$2" != {container} ] || [ ! -S "{socket}" ]; then
  echo "Error response from daemon: No such container: $2" >&2; exit 1
fi
shift 3
SPARKCTL_FLEETDOOR_ADMIN_SOCKET="{socket}" PYTHONPATH="{repo}" exec "{python}" "$@"
"""


@pytest.fixture
def door_fleet(fleet, tmp_path, monkeypatch):
    """The fleet model (members a and b) whose door member's head is a real SSH server on loopback,
    where `docker exec sparkctl-fleet-door ...` reaches the door of `fleet`."""
    from loopback_sshd import REPO, LoopbackSSHD

    from sparkctl.fleet.model import Fleet, FrontDoor, Member, Rollout
    from sparkctl.fleetdoor.placement import CONTAINER
    from sparkctl.inventory.models import Inventory

    door = fleet[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER.format(container=CONTAINER, socket=door.socket, repo=REPO, python=sys.executable))
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")  # the SSH server's commands inherit it
    with LoopbackSSHD(tmp_path / "sshd") as sshd:
        inv = sshd.inventory(tmp_path)

        def named(name: str) -> Member:
            data = inv.model_dump(mode="json", exclude_none=True)
            data["cluster"]["name"] = name
            return Member(tmp_path / "inventory.yaml", Inventory.model_validate(data))

        yield door, Fleet(name="t", path=tmp_path / "fleet.yaml", members=[named("a"), named("b")],
                          front_door=FrontDoor(member="a", port=door.port), rollout=Rollout())  # fmt: skip


def test_the_admin_api_drains_over_ssh_and_says_what_is_still_in_flight(door_fleet):
    from sparkctl.errors import InputError
    from sparkctl.fleet import door_admin

    door, f = door_fleet
    wait_idle(door)
    stream = open_stream(door, "in flight while drained")
    member = next(n for n, k in outstanding(door).items() if k == 1)
    try:
        with pytest.raises(door_admin.DrainTimeout) as e:
            door_admin.drain(f, member, wait_s=0.3)
        assert e.value.in_flight == 1 and f"{member} is drained at the fleet door but 1 request(s)" in e.value.message
        st = door_admin.status(f)
        assert st["members"][member]["state"] == "drained" and st["members"][member]["outstanding"] == 1
        done: dict = {}
        t = threading.Thread(target=lambda: done.update(doc=door_admin.drain(f, member, wait_s=60)))
        t.start()
        time.sleep(0.3)
        assert t.is_alive()  # waits for the stream
        stream.close()
        t.join(30)
        assert done["doc"]["drained"] == member and done["doc"]["members"][member]["outstanding"] == 0
    finally:
        stream.close()
        doc = door_admin.undrain(f, member)
    assert doc["members"][member]["state"] == "passing"
    with pytest.raises(InputError, match="no member 'c'"):
        door_admin.drain(f, "c")
