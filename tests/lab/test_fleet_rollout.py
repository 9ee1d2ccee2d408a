"""Fleets (issue 22) on the lab's two pairs: a rolling `fleet reload` under load through the
fleet's front door fails no request and ends with both members on the new config, which asks a
key (gateway.api_keys_file on each head, fleet/keys.py): a client without it is refused at the
fleet's door, and a rolling `fleet restart` under load with it fails no request either (sparkctl's
drain reads, gates and smokes send each member's key); a rollout whose second member fails at
start-up rolls that member back, keeps the first on the new config, serves throughout and exits 1
with the per-member state; a member's engine killed under load: the fleet keeps answering from
the other member.

Clients are the OpenAI Python client at max_retries=0, several streams through the front door
(every error reaches the test). Changes are warm (an env mark outside the compile inputs), so each
member's restart takes the lab's ~2 s warm start.

The lab's second pair and the fleet on it are shared with the other fleet files
(tests/lab/conftest.py); this module's teardown puts each member back on its inventory file. Cost
on the lab (2 cores, shared; runs behind vllm-router): the rolling reload 13-14 s, the rolling
restart after it ~30 s (measured beside other sessions' tests), the failed rollout 13-14 s, the
killed engine ~17 s, the teardown ~6 s.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from client_load import Load
from labcli import HEAD_IP, door_states, sparkctl, wait_door, wait_passing

from sparkctl_lab.paths import FLEET_PATH as FLEET  # this lab's fleet file (a second lab's LAB_DIR differs)

pytestmark = pytest.mark.lab

DOOR = f"http://{HEAD_IP}:8890"  # the front door on member lab's head (the fleet file's front_door)
KEYS_FILE = "/etc/sparkctl-lab-fleet/api-keys"  # on both heads; every config these tests roll to asks it
KEY = "sk-lab-fleet-key-made-up-0001"  # made up for these tests
MEMBERS = {"lab": ("head", "inventory.yaml"), "lab-2": ("head2", "inventory-2.yaml")}  # name: (lab host of its head, file)
_fresh = iter(range(1, 10_000))


def inventory(lab, member: str) -> Path:
    return Path(lab.LAB_DIR) / MEMBERS[member][1]


def applied(lab, member: str) -> str:
    out = lab.host_exec(MEMBERS[member][0], ["cat", "/var/lib/sparkctl/state/applied.json"], check=True).stdout
    return json.loads(out)["config_hash"]


def journal(lab, member: str) -> bool:
    return lab.host_exec(MEMBERS[member][0], ["test", "-e", "/var/lib/sparkctl/state/journal.json"]).returncode == 0


class DoorWatch:
    """The front door's member states, sampled about once a second while a rollout runs."""

    def __init__(self, lab):
        self.lab, self.samples, self.times = lab, [], []  # the states, and when each was read (time.monotonic())
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "DoorWatch":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.7):
            try:
                states = door_states(self.lab)
                self.times.append(time.monotonic())
                self.samples.append(states)
            except Exception:  # noqa: BLE001 - a sample lost to the busy machine is not a finding
                pass

    def drained(self) -> list[set[str]]:
        return [{n for n, s in st.items() if s == "drained"} for st in self.samples]

    def out_of_the_door(self, member: str) -> tuple[float, float]:
        """(first sample that saw `member` drained, the next sample that saw it back)."""
        drained = self.drained()
        first = next(i for i, d in enumerate(drained) if member in d)
        back = next((i for i in range(first, len(drained)) if member not in drained[i]), len(drained) - 1)
        return self.times[first], self.times[back]


def served_throughout(load: Load, door: DoorWatch, began: float, ended: float) -> None:
    """Requests were answered the whole time: before the rollout began, while each member was out of
    the door (the other one served them), and after it ended."""
    ok = [r for r in load.results if r.outcome == "ok"]
    assert any(r.start + r.seconds < began for r in ok), "no request answered before the rollout"
    for member in MEMBERS:
        since, until = door.out_of_the_door(member)
        assert any(since <= r.start and r.start + r.seconds <= until for r in ok), f"none answered while {member} was out"
    assert any(r.start > ended for r in ok), "no request answered after the rollout"


def config_dir(lab, tmp_path: Path, name: str, **extra: dict) -> Path:
    """DIR with <member>.yaml for both members: each member's inventory with a new env mark (warm:
    outside the compile inputs) and KEYS_FILE as its gateway.api_keys_file, plus `extra[member]`'s
    runtime fields."""
    d = tmp_path / name
    d.mkdir()
    mark = f"{name}-{next(_fresh)}-{int(time.time())}"
    for member in MEMBERS:
        doc = yaml.safe_load(inventory(lab, member).read_text())
        doc["runtime"]["env"] = {**doc["runtime"].get("env", {}), "SPARKCTL_TEST_MARK": mark}
        doc["gateway"] = {**(doc.get("gateway") or {}), "api_keys_file": KEYS_FILE}
        doc["runtime"].update(extra.get(member.replace("-", "_"), {}))
        (d / f"{member}.yaml").write_text(yaml.safe_dump(doc))
    return d


@pytest.fixture(scope="module")
def fleet(lab, fleet_lab):
    """The fleet on the lab's two pairs (tests/lab/conftest.py); at the end each member is back on its
    inventory file (these tests change their configs) and the door's member `lab` on its own."""
    for head, _ in MEMBERS.values():
        lab.host_exec(head, ["sh", "-c", f"umask 077 && mkdir -p {Path(KEYS_FILE).parent} && "
                                         f"printf '# clients\\n{KEY}\\n' > {KEYS_FILE}"], check=True)  # fmt: skip
    yield FLEET
    for member in MEMBERS:
        inv = str(inventory(lab, member))
        if journal(lab, member):
            sparkctl("rollback", "-i", inv, "--yes", rc=None)
        if applied(lab, member) != sparkctl("render", "-i", inv)["config_hash"]:
            sparkctl("reload", "-i", inv, "--config", inv, "--yes", rc=None)
    sparkctl("up", "-i", str(inventory(lab, "lab")), rc=None)
    for head, _ in MEMBERS.values():
        lab.host_exec(head, ["rm", "-rf", str(Path(KEYS_FILE).parent)])


def test_a_rolling_reload_across_both_pairs_fails_no_request_and_both_end_on_the_new_config(lab, fleet, tmp_path):
    d = config_dir(lab, tmp_path, "roll")
    plan = sparkctl("fleet", "reload", "-f", str(fleet), "--config-dir", str(d), "--check")
    assert plan["order"] == ["lab", "lab-2"]
    assert [m["prediction"] for m in plan["members"]] == ["warm", "warm"]
    new = {m["member"]: m["to_config"] for m in plan["members"]}
    with Load(DOOR, api_key=KEY) as load, DoorWatch(lab) as door:
        began = time.monotonic()
        doc = sparkctl("fleet", "reload", "-f", str(fleet), "--config-dir", str(d), "--yes")
        ended = time.monotonic()
    print(f"\nrolling reload: {len(load.results)} requests, {len(load.failed())} failed, door samples {door.drained()}")
    assert doc["outcome"] == "ok", json.dumps(doc, indent=1)[-3000:]
    # each member was out of the door for its change, one at a time, lab first
    drained = [d for d in door.drained() if d]
    assert {"lab"} in drained and {"lab-2"} in drained and all(len(d) == 1 for d in drained)
    assert drained.index({"lab"}) < drained.index({"lab-2"})
    assert load.failed() == [], [(r.outcome, r.message, round(r.seconds, 2)) for r in load.failed()][:20]
    served_throughout(load, door, began, ended)
    for m in doc["members"]:
        assert (m["outcome"], m["config_now"], m["door"]) == ("ok", new[m["member"]], "passing"), m
        assert m["replace"] == {"file": str(inventory(lab, m["member"])), "with": str(d / f"{m['member']}.yaml")}
        assert applied(lab, m["member"]) == new[m["member"]]
        last = sparkctl("history", "-i", str(inventory(lab, m["member"])))["events"][-1]
        assert (last["command"], last["outcome"], last["config_hash"]) == ("reload", "ok", new[m["member"]])
    assert yaml.safe_load(inventory(lab, "lab").read_text())["runtime"]["env"].get("SPARKCTL_TEST_MARK") is None  # not rewritten

    # both now ask the key: a client without it is refused at the fleet's door, in OpenAI's shape
    body = {"model": "deepseek-v4.1-flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    refused = httpx.post(f"{DOOR}/v1/chat/completions", json=body, timeout=30)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == 401, refused.text
    # a rolling restart of the recorded (keyed) configs under load: sparkctl's drain reads, gates and
    # smokes send each member's key, read from its head; no client with the key sees a failure
    t0 = time.monotonic()
    with Load(DOOR, api_key=KEY) as load, DoorWatch(lab) as door:
        doc = sparkctl("fleet", "restart", "-f", str(fleet), "--yes")
    took = time.monotonic() - t0
    print(f"\nrolling restart (keys on): {len(load.results)} requests, {len(load.failed())} failed, {took:.1f} s")
    assert doc["outcome"] == "ok", json.dumps(doc, indent=1)[-3000:]
    assert KEY not in json.dumps(doc)
    assert {"lab"} in door.drained() and {"lab-2"} in door.drained()
    assert load.failed() == [], [(r.outcome, r.message, round(r.seconds, 2)) for r in load.failed()][:20]
    for m in doc["members"]:
        assert (m["outcome"], m["config_now"], m["door"]) == ("ok", new[m["member"]], "passing"), m
        last = sparkctl("history", "-i", str(inventory(lab, m["member"])))["events"][-1]
        assert (last["command"], last["outcome"], last["config_hash"]) == ("restart", "ok", new[m["member"]])


def test_a_rollout_whose_second_member_fails_at_start_up_rolls_it_back_and_stops(lab, fleet, tmp_path):
    before = {m: applied(lab, m) for m in MEMBERS}
    # vLLM's argparse refuses the backend: lab-2's new engine exits at start-up
    d = config_dir(lab, tmp_path, "fail", lab_2={"moe_backend": "b12x_experimental", "custom_values": ["moe_backend"]})
    with Load(DOOR, api_key=KEY) as load:
        doc = sparkctl("fleet", "reload", "-f", str(fleet), "--config-dir", str(d), "--yes", rc=1)
    print(f"\nfailed rollout: {len(load.results)} requests, {len(load.failed())} failed")
    for m in doc["members"]:
        print(
            f"  {m['member']:<6} {m['outcome']:<12} now {m['config_now']} old {m['old_config']} new {m['new_config']} "
            f"door {m['door']} {(m['reason'] or '')[:160]}"
        )
    assert doc["outcome"] == "failed" and doc["reason"].startswith("lab-2: rolled back")
    lab_r, lab2_r = doc["members"]
    assert lab_r["outcome"] == "ok" and lab_r["config_now"] == applied(lab, "lab") != before["lab"]
    # its runtime refused to start (vLLM's argparse on the head, or the worker's exit: whichever the step sees first)
    assert lab2_r["outcome"] == "rolled back" and lab2_r["reason"].startswith("runtime on head2:")
    assert lab2_r["config_now"] == lab2_r["old_config"] == applied(lab, "lab-2") == before["lab-2"]
    assert lab2_r["new_config"] != before["lab-2"] and lab2_r["door"] == "passing"  # serves again: put back
    assert not journal(lab, "lab-2")
    assert load.failed() == [], [(r.outcome, r.message, round(r.seconds, 2)) for r in load.failed()][:20]
    assert any("fleet rollback --to 1 --member NAME" in n for n in doc["notes"])


def test_a_killed_member_engine_leaves_the_fleet_answering_from_the_other(lab, fleet):
    assert wait_passing(lab) == {"lab": "passing", "lab-2": "passing"}
    with Load(DOOR, api_key=KEY) as load:
        time.sleep(1)
        killed_at = time.monotonic()
        lab.host_exec("head2", ["docker", "kill", "sparkctl-head"], check=True)
        # the door's health checks take lab-2 out (2 failed checks 2 s apart); new requests go to lab
        states = wait_door(lab, lambda st: st["lab-2"] != "passing", timeout=30)
        time.sleep(max(0.0, killed_at + 10 - time.monotonic()))  # requests sent well after it: `after`
        # the member comes back under the load and the door takes it again (what lab-2's gateway held
        # since the kill is served then, not answered 503 at its hold_s after the load ends)
        up_at = time.monotonic()
        sparkctl("up", "-i", str(inventory(lab, "lab-2")))
        back = wait_passing(lab)
    after = [r for r in load.results if killed_at + 6 <= r.start < up_at]  # lab-2 out, not yet back
    late = [r for r in after if r.outcome != "ok"]
    print(f"\nkilled engine: {len(load.results)} requests, {len(load.failed())} failed, door {states}")
    assert states["lab"] == "passing" and states["lab-2"] != "passing"
    assert late == [], [(r.outcome, r.message, round(r.start - killed_at, 2)) for r in late][:20]
    assert len(load.failed()) <= load.threads  # only requests in flight on lab-2 may fail, once
    assert [r for r in after if r.outcome == "ok"]  # answered after it
    assert back["lab-2"] == "passing"
