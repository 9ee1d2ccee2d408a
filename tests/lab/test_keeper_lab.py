"""The keeper (issue 37, docs/keeper.md) on the lab: installed by `up` on the head (the lab's
stand-in for systemd runs it: lab/sparkctl_lab/hw/systemctl.py), it brings the group back by
itself after a `docker kill` of the head's engine, the worker's container or the drafter, and a
reboot of the worker or the offload host, and stops after keeper.max_recoveries on an engine that crashes at every start, the front
door answering 503 with the reason, until a person's `sparkctl restart`.

One cluster for the module: the lab inventory with the keeper on (grace 1 s, one look a second,
at most 2 recoveries in 10 min) and SIM_FAULTS_FILE in the head's cache volume (the simulator
re-reads it while serving: `crash_now` crashes it right after every start). Clients are the real
OpenAI client at max_retries=0 through the front door. The module ends on the lab's own inventory
(`up` removes the keeper: keeper.enabled is false there).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from labcli import URL, sparkctl, variant

pytestmark = pytest.mark.lab

NAME = "deepseek-v4.1-flash"
FAULTS_HOST = "/var/lib/sparkctl/cache/keeper-test-faults"  # caches.host_path on the head
FAULTS_IN_CONTAINER = "/root/.cache/vllm/keeper-test-faults"  # caches.container_path
UNIT = "sparkctl-keeper.service"
EVENTS = "/var/lib/sparkctl/state/events.jsonl"  # state.EVENTS on the head: history's events, one a line
KEEPER_STATE = "/var/lib/sparkctl/state/keeper.json"  # state.KEEPER


@pytest.fixture(scope="module")
def kept(lab, tmp_path_factory) -> Path:
    lab_inv = Path(lab.INVENTORY_PATH)
    from sparkctl_lab import hostfiles, paths
    from sparkctl_lab.hw import tools

    # the keeper runs this checkout's sparkctl: the lab's own (on the head's PATH) is whichever
    # checkout last ran `lab up`, so a copy of it on the head's disk pins this one
    hostfiles.write_if_changed(paths.host_dir("head") / "var-lib-sparkctl" / "sparkctl-under-test",
                               tools.scripts("head")["sparkctl"], 0o755)  # fmt: skip
    env = {**yaml.safe_load(lab_inv.read_text())["runtime"]["env"], "SIM_FAULTS_FILE": FAULTS_IN_CONTAINER}
    inv = variant(lab_inv, tmp_path_factory.mktemp("keeper"), "kept", runtime__env=env,
                  keeper={"enabled": True, "grace_s": 1, "interval_s": 1, "max_recoveries": 2, "window_s": 600,
                          "sparkctl": "/var/lib/sparkctl/sparkctl-under-test"})  # fmt: skip
    lab.host_exec("head", ["rm", "-f", FAULTS_HOST])
    doc = sparkctl("up", "-i", str(inv), rc=None)
    assert not doc.get("failed"), [r for r in doc.get("results", []) if r["status"] == "failed"] or doc
    keeper = {r["host"]: r for r in doc["results"] if r["step"] == "keeper"}
    assert keeper["head"]["status"] == "changed" and "enabled and active" in keeper["head"]["message"], keeper
    assert keeper["worker"]["status"] == "changed", keeper  # the head's own key, authorised there
    yield inv
    lab.host_exec("head", ["rm", "-f", FAULTS_HOST])
    # the keeper goes (keeper.enabled: false there); a recovery of its own may hold the lock a moment
    doc = sparkctl("up", "-i", str(lab_inv), "--wait", "300", rc=None)
    assert lab.host_exec("head", ["systemctl", "is-active", UNIT]).stdout.strip() == "inactive", doc


def client() -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{URL}/v1", api_key="lab", max_retries=0, timeout=120)


def one_request(c: openai.OpenAI) -> str:
    """One streamed chat completion: ok, empty, or what failed."""
    try:
        chunks = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Count from 1 to 50."}],
                                           max_tokens=64, temperature=0, stream=True)  # fmt: skip
        return "ok" if "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) else "empty"
    except openai.APIStatusError as e:
        return f"{e.status_code}: {e.message}"
    except Exception as e:  # noqa: BLE001 - any other failure is a failed request too
        return repr(e)


def started_at(lab, name: str) -> str:
    return lab.host_exec("head", ["docker", "inspect", "-f", "{{.State.StartedAt}}", name], check=True).stdout.strip()


def head_engine_started(lab) -> str:
    """When the head's engine container started ("" while there is none: a restart removed it)."""
    r = lab.host_exec("head", ["docker", "inspect", "-f", "{{.State.StartedAt}}", "sparkctl-head"])
    return r.stdout.strip() if r.returncode == 0 else ""


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # state.now()'s format: whole seconds


def keeper_events(inv: Path, since: str) -> list[dict]:
    """The keeper's recoveries in history after `since` (the head keeps the newest events only; a
    recovery takes seconds, so none of them is in the second `since` names)."""
    events = sparkctl("history", "-i", str(inv), "-n", "0")["events"]
    return [e for e in events if e.get("trigger") == "keeper" and e.get("at", "") > since]


def wait_events(lab, inv: Path, since: str, n: int, timeout: float = 60) -> list[dict]:
    """keeper_events, once the head's events file holds n of them: it is watched there (a `tail` in
    the head's namespaces), not by a sparkctl run each second that would take the CPU from the
    recovery it waits for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tail = lab.host_exec("head", ["tail", "-n", "40", EVENTS]).stdout.splitlines()
        found = [json.loads(line) for line in tail if '"trigger":"keeper"' in line]
        if len([e for e in found if e.get("at", "") > since]) >= n:
            break
        time.sleep(0.5)
    return keeper_events(inv, since)


def keeper_state(lab, want: str, timeout: float) -> dict:
    """The keeper's state file on the head once it says `want` (or the last one read, at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        st = json.loads(lab.host_exec("head", ["sh", "-c", f"cat {KEEPER_STATE} || echo {{}}"]).stdout)
        if st.get("state") == want or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def warm_start_s(inv: Path) -> float:
    starts = [e["start_seconds"] for e in sparkctl("history", "-i", str(inv), "-n", "0")["events"]
              if e.get("cache") == "warm" and e.get("start_seconds")]  # fmt: skip
    return starts[-1] if starts else 30.0


@pytest.mark.parametrize("host, container", [("head", "sparkctl-head"), ("worker", "sparkctl-worker"),
                                             ("offload", "sparkctl-drafter")], ids=["head", "worker", "drafter"])  # fmt: skip
def test_a_killed_container_serves_again_by_itself_and_only_requests_in_flight_fail(lab, kept, host, container):
    """The head's engine, the worker's or the drafter (whose loss the head's engine dies of 2-4 s
    later, unless the keeper's restart comes first): the keeper restarts the group; clients stream
    until it serves again (its later steps, throughput and record, change nothing they see)."""
    lab.host_exec("head", ["systemctl", "restart", UNIT], check=True)  # a fresh count of recoveries
    limit = warm_start_s(kept) + 30
    before = now_utc()
    outcomes: list[tuple[float, float, str]] = []  # (sent, ended, outcome)
    stop = threading.Event()

    def load() -> None:
        c = client()
        while not stop.is_set():
            t = time.monotonic()
            said = one_request(c)
            outcomes.append((t, time.monotonic(), said))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1)
    gateway_started = started_at(lab, "sparkctl-gateway")
    head_started = started_at(lab, "sparkctl-head")
    killed = time.monotonic()
    lab.host_exec(host, ["docker", "kill", container], check=True)
    kill_done = time.monotonic() - killed  # a request sent before this may have reached the engine
    restarted = served = None  # when the restart's new head engine was seen, and a request sent after it answered
    try:
        while served is None and time.monotonic() - killed < limit + 30:
            if restarted is None and head_engine_started(lab) not in (head_started, ""):
                restarted = time.monotonic()  # a request sent from now on is held until it serves
            elif restarted is not None:
                served = min((end for sent, end, o in outcomes if o == "ok" and sent > restarted), default=None)
            time.sleep(0.25)
    finally:
        stop.set()
        for t in threads:
            t.join(150)
    assert served is not None, ("not serving again", restarted, outcomes[-5:])
    back = served - killed
    # the recovery's event comes after its health gate, throughput and record steps
    events = wait_events(lab, kept, before, 1, timeout=limit)
    assert len(events) == 1, events
    (e,) = events
    assert (e["command"], e["outcome"]) == ("restart", "ok"), e
    assert (e["cause"]["kind"], e["cause"]["container"], e["cause"]["exit_code"]) == ("killed", container, 137), e
    assert back < limit and 0 < e["downtime_seconds"] < limit, (back, e)  # history: from its first look at it gone
    failed = [(round(s - killed, 2), round(end - killed, 2), o) for s, end, o in outcomes if o != "ok"]
    # only the requests in flight at the engine's end fail; those sent after it are held and served, none
    # empty. The engine ends at the kill, or, without its drafter, when its health checks of it give up
    # (3 checks, 2-4 s: lab/sparkctl_lab/sim/server.py) unless the keeper's restart stops it first.
    died = min((end for _, end, _ in failed), default=0.0) if host == "offload" else kill_done
    gateway = (gateway_started, started_at(lab, "sparkctl-gateway"))
    assert all(s <= died and end <= died + 2 for s, end, _ in failed), (died, failed, "gateway started", gateway)
    if host == "head":  # clients saw the outage from the kill (the head may serve on a moment without the others):
        # history's downtime is at most theirs, until the head served again, not the recovery's later steps
        first_ok = min(end for sent, end, o in outcomes if o == "ok" and sent > killed + kill_done) - killed
        assert e["downtime_seconds"] <= first_ok + 1, (e["downtime_seconds"], first_ok)
    print(
        f"\n{container} killed: serving again {back:.1f} s after, {e['downtime_seconds']} s down in history "
        f"(warm start {limit - 30:.1f} s), {len(failed)} of {len(outcomes)} requests failed; "
        f"history: {json.dumps(e['cause'])[:200]}"
    )


@pytest.mark.parametrize("host", ["worker", "offload"])
def test_a_rebooted_host_serves_again_by_itself_with_the_engram_tables_placed_again(lab, kept, host):
    """A host reboots (lab.reboot: its PID 1 stops, containers killed, dockerd stopped, its tmpfs (the
    offload host's Engram tables) gone with its mount namespace, and starts again: sshd, dockerd).
    Nobody runs sparkctl."""
    lab.host_exec("head", ["systemctl", "restart", UNIT], check=True)  # a fresh count of recoveries
    before = now_utc()
    rebooted = time.monotonic()
    lab.reboot(host)
    if host == "offload":
        assert lab.host_exec(host, ["sh", "-c", "mount | grep -c /mnt/engram || true"]).stdout.strip() == "0"
    events = wait_events(lab, kept, before, 1, timeout=120)
    assert [(e["outcome"], e["cause"]["host"], e["cause"]["kind"]) for e in events] == [
        ("ok", host, "host lost (rebooted or unreachable)")
    ], events
    assert one_request(client()) == "ok"
    doc = sparkctl("doctor", "-i", str(kept), "--only", "engram", rc=None)
    assert {c["name"]: c["status"] for c in doc["checks"]}.items() >= {("engram.placed", "ok"), ("engram.checksums", "ok")}, doc
    print(f"\nserving again {time.monotonic() - rebooted:.1f} s after the {host}'s reboot")


def test_an_engine_that_crashes_at_every_start_is_given_up_on_with_a_503_that_says_why(lab, kept):
    # a fresh count of recoveries, and no state file an earlier run left (it may say gave_up)
    lab.host_exec("head", ["sh", "-c", f"systemctl stop {UNIT} && rm -f {KEEPER_STATE} && systemctl start {UNIT}"], check=True)
    before = now_utc()
    lab.host_exec("head", ["sh", "-c", f"echo crash_now > {FAULTS_HOST}"], check=True)
    st = keeper_state(lab, "gave_up", timeout=240)
    gave_up = time.monotonic()
    assert st.get("state") == "gave_up", st
    events = keeper_events(kept, before)
    # max_recoveries, then no more; each failed recovery started the crashing engine once (no rollback
    # to the same config)
    assert [e["outcome"] for e in events] == ["restart failed", "restart failed"], events
    # the front door answers 503 at once, naming the reason; doctor says so
    r = httpx.post(f"{URL}/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 4}, timeout=30)
    assert r.status_code == 503 and "keeper gave up: 2 recoveries" in r.json()["error"]["message"], r.text
    doc = sparkctl("doctor", "-i", str(kept), "--only", "keeper", rc=None)
    (check,) = [c for c in doc["checks"] if c["name"] == "keeper.state"]
    assert check["status"] == "failed" and "gave up" in check["message"] and check["runbook"], check
    time.sleep(max(0.0, 3 - (time.monotonic() - gave_up)))  # three looks at least since it gave up
    assert len(keeper_events(kept, before)) == 2  # no flapping
    # a person fixes the cause and restarts: it serves, and the keeper watches again
    lab.host_exec("head", ["rm", "-f", FAULTS_HOST], check=True)
    sparkctl("restart", "--yes", "-i", str(kept))
    assert one_request(client()) == "ok"
    keeper_state(lab, "watching", timeout=30)
    doc = sparkctl("doctor", "-i", str(kept), "--only", "keeper", rc=None)
    (check,) = [c for c in doc["checks"] if c["name"] == "keeper.state"]
    assert check["status"] == "ok" and "watching" in check["message"], check
