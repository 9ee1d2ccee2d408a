"""The keeper (issue 37, docs/keeper.md) on the lab: installed by `up` on the head (the lab's
stand-in for systemd runs it: lab/sparkctl_lab/hw/systemctl.py), it brings a killed engine back by
itself, and stops after keeper.max_recoveries on an engine that crashes at every start, the front
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


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # state.now()'s format: whole seconds


def keeper_events(inv: Path, since: str) -> list[dict]:
    """The keeper's recoveries in history after `since` (the head keeps the newest events only; a
    recovery takes seconds, so none of them is in the second `since` names)."""
    events = sparkctl("history", "-i", str(inv), "-n", "0")["events"]
    return [e for e in events if e.get("trigger") == "keeper" and e.get("at", "") > since]


def wait_events(inv: Path, since: str, n: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(events := keeper_events(inv, since)) < n and time.monotonic() < deadline:
        time.sleep(1)
    return events


def warm_start_s(inv: Path) -> float:
    starts = [e["start_seconds"] for e in sparkctl("history", "-i", str(inv), "-n", "0")["events"]
              if e.get("cache") == "warm" and e.get("start_seconds")]  # fmt: skip
    return starts[-1] if starts else 30.0


def test_a_killed_engine_serves_again_by_itself_and_only_requests_in_flight_fail(lab, kept):
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
    killed = time.monotonic()
    lab.host_exec("head", ["docker", "kill", "sparkctl-head"], check=True)
    kill_done = time.monotonic() - killed  # a request sent before this may have reached the engine
    try:
        while time.monotonic() - killed < limit:  # served again: a request sent after the kill succeeded
            if any(o == "ok" and sent > killed + 1 for sent, _, o in outcomes):
                break
            time.sleep(0.5)
        back = time.monotonic() - killed
    finally:
        stop.set()
        for t in threads:
            t.join(150)
    assert back < limit, (back, outcomes[-10:])
    failed = [(round(s - killed, 1), o) for s, e, o in outcomes if o != "ok"]
    # only the requests in flight at the kill fail; those sent after it are held and served, none empty
    gateway = (gateway_started, started_at(lab, "sparkctl-gateway"))
    assert all(s <= kill_done for s, _ in failed), (kill_done, failed, "gateway started", gateway)
    events = wait_events(kept, before, 1)  # the recovery's event comes after its throughput and record steps
    assert len(events) == 1, events
    (e,) = events
    assert (e["command"], e["outcome"]) == ("restart", "ok"), e
    assert (e["cause"]["kind"], e["cause"]["container"], e["cause"]["exit_code"]) == ("killed", "sparkctl-head", 137), e
    assert 0 < e["downtime_seconds"] < limit, e
    print(f"\nserving again {back:.1f} s after the kill (warm start {limit - 30:.1f} s); history: {json.dumps(e)[:300]}")


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
    events = wait_events(kept, before, 1, timeout=120)
    assert [(e["outcome"], e["cause"]["host"], e["cause"]["kind"]) for e in events] == [
        ("ok", host, "host lost (rebooted or unreachable)")
    ], events
    assert one_request(client()) == "ok"
    doc = sparkctl("doctor", "-i", str(kept), "--only", "engram", rc=None)
    assert {c["name"]: c["status"] for c in doc["checks"]}.items() >= {("engram.placed", "ok"), ("engram.checksums", "ok")}, doc
    print(f"\nserving again {time.monotonic() - rebooted:.1f} s after the {host}'s reboot")


def test_an_engine_that_crashes_at_every_start_is_given_up_on_with_a_503_that_says_why(lab, kept):
    lab.host_exec("head", ["systemctl", "restart", UNIT], check=True)  # a fresh count of recoveries
    before = now_utc()
    lab.host_exec("head", ["sh", "-c", f"echo crash_now > {FAULTS_HOST}"], check=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        st = json.loads(lab.host_exec("head", ["sh", "-c", "cat /var/lib/sparkctl/state/keeper.json || echo {}"]).stdout)
        if st.get("state") == "gave_up":
            break
        time.sleep(1)
    assert st.get("state") == "gave_up", st
    events = keeper_events(kept, before)
    assert len(events) == 2 and all(e["outcome"] != "ok" for e in events), events  # max_recoveries, then no more
    # the front door answers 503 at once, naming the reason; doctor says so
    r = httpx.post(f"{URL}/v1/completions", json={"model": NAME, "prompt": "hi", "max_tokens": 4}, timeout=30)
    assert r.status_code == 503 and "keeper gave up: 2 recoveries" in r.json()["error"]["message"], r.text
    doc = sparkctl("doctor", "-i", str(kept), "--only", "keeper", rc=None)
    (check,) = [c for c in doc["checks"] if c["name"] == "keeper.state"]
    assert check["status"] == "failed" and "gave up" in check["message"] and check["runbook"], check
    time.sleep(3)
    assert len(keeper_events(kept, before)) == 2  # no flapping
    # a person fixes the cause and restarts: it serves, and the keeper watches again
    lab.host_exec("head", ["rm", "-f", FAULTS_HOST], check=True)
    sparkctl("restart", "--yes", "-i", str(kept))
    assert one_request(client()) == "ok"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        doc = sparkctl("doctor", "-i", str(kept), "--only", "keeper", rc=None)
        (check,) = [c for c in doc["checks"] if c["name"] == "keeper.state"]
        if check["status"] == "ok":
            break
        time.sleep(1)
    assert check["status"] == "ok" and "watching" in check["message"], check
