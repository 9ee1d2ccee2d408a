"""`sparkctl reload` on the lab: warm and cold as planned, only what must restart, automatic
rollback (a refused flag, never healthy, the Marlin fallback, a worker killed mid-restart), the
lock, SIGKILL at three points then --resume or rollback, requests in flight finishing at the drain.

Faults are the runtime's own (simulator switches in runtime.env, a flag vLLM refuses) or done by
hand on the hosts (docker kill); sparkctl itself is killed with SIGKILL.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from labcli import URL, end_background, fresh_batched_tokens, run, sparkctl, start
from labcli import variant as inventory_variant

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def inv(lab) -> Path:
    path = Path(lab.INVENTORY_PATH)
    sparkctl("up", "-i", str(path))
    # a decode baseline for --min-throughput-ratio: a restart measures and records it
    sparkctl("restart", "-i", str(path), "--yes")
    return path


@pytest.fixture(autouse=True)
def restored(lab, inv):
    """Whatever a test's outcome, the next one starts from the inventory's config, serving, with no
    reload left running and no interrupted one (a failed test must not fail the ones after it)."""
    yield
    end_background()
    if lab.host_exec("head", ["test", "-e", "/var/lib/sparkctl/state/lock"]).returncode == 0:
        sparkctl("unlock", "-i", str(inv), "--yes", rc=None)  # of a run killed here or by the test: gone
    if journal(lab) is not None:
        sparkctl("rollback", "-i", str(inv), "--yes", rc=None)
    if applied_hash(lab) != sparkctl("render", "-i", str(inv))["config_hash"]:
        sparkctl("reload", "-i", str(inv), "--config", str(inv), "--yes", rc=None)
    if not serving():
        sparkctl("up", "-i", str(inv), rc=None)


def serving() -> bool:
    try:
        return httpx.get(f"{URL}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def variant(inv: Path, tmp_path: Path, name: str, **runtime) -> Path:
    """The inventory with runtime fields set (`speculative__drafter_image=...` reaches into runtime.speculative)."""
    return inventory_variant(inv, tmp_path, name, **{f"runtime__{k}": v for k, v in runtime.items()})


def cold(inv: Path, tmp_path: Path, name: str = "cold", **runtime) -> Path:
    """A variant whose compile inputs this cluster has never served (a scheduler size no run used
    before): its start compiles, so the restart phase lasts seconds."""
    return variant(inv, tmp_path, name, max_num_batched_tokens=fresh_batched_tokens(), **runtime)


def served_name() -> str:
    return httpx.get(f"{URL}/v1/models", timeout=10).json()["data"][0]["id"]


def started(lab, host: str, name: str) -> str:
    return lab.host_exec(host, ["docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", name], check=True).stdout.strip()


def applied_hash(lab) -> str:
    return json.loads(lab.host_exec("head", ["cat", "/var/lib/sparkctl/state/applied.json"], check=True).stdout)["config_hash"]


def journal(lab) -> dict | None:
    r = lab.host_exec("head", ["cat", "/var/lib/sparkctl/state/journal.json"])
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def test_check_shows_the_plan_and_restarts_nothing(lab, inv, tmp_path):
    before = {h: started(lab, h, n) for h, n in (("head", "sparkctl-head"), ("offload", "sparkctl-drafter"))}
    doc = sparkctl(
        "reload", "-i", str(inv), "--config", str(variant(inv, tmp_path, "renamed", served_model_name="lab-renamed")), "--check"
    )
    plan = doc["plan"]
    assert [c["field"] for c in plan["changes"]] == ["runtime.served_model_name"]
    assert plan["restart_containers"] == ["sparkctl-worker", "sparkctl-head"] and plan["prediction"] == "warm"
    assert {h: started(lab, h, n) for h, n in (("head", "sparkctl-head"), ("offload", "sparkctl-drafter"))} == before
    # a journal this sparkctl cannot read is said beside the plan, in the human output as in --json
    lab.host_exec("head", ["sh", "-c", "echo '{torn' > /var/lib/sparkctl/state/journal.json"], check=True)
    try:
        human = run(["reload", "-i", str(inv), "--config", str(inv), "--check"])
    finally:
        lab.host_exec("head", ["rm", "-f", "/var/lib/sparkctl/state/journal.json"], check=True)
    notes = [line for line in human.stdout.splitlines() if line.startswith("note: ")]
    assert human.returncode == 0 and len(notes) == 1 and "journal.json" in notes[0], (human.stdout, human.stderr)


def test_a_change_outside_the_compile_hash_is_warm_as_planned_and_one_inside_is_cold(lab, inv, tmp_path):
    renamed = variant(inv, tmp_path, "renamed", served_model_name="lab-renamed")
    warm = sparkctl("reload", "-i", str(inv), "--config", str(renamed), "--yes")
    assert warm["outcome"] == "ok" and warm["plan"]["prediction"] == "warm"
    assert warm["runtime_start"]["cache"].startswith("warm") and served_name() == "lab-renamed"
    assert [t["phase"] for t in warm["timeline"]] == ["prestage", "drain", "restart", "verify", "commit", "done"]
    assert warm["downtime_seconds"] > 0
    cold_inv = cold(inv, tmp_path, served_model_name="lab-renamed")
    compiled = sparkctl("reload", "-i", str(renamed), "--config", str(cold_inv), "--yes")
    assert compiled["plan"]["prediction"] == "cold"
    assert compiled["plan"]["compile_fields_changed"] == ["runtime.max_num_batched_tokens"]
    assert compiled["outcome"] == "ok" and compiled["runtime_start"]["cache"].startswith("cold")
    back = sparkctl("reload", "-i", str(cold_inv), "--config", str(inv), "--yes")
    assert back["outcome"] == "ok" and back["plan"]["prediction"] == "warm"  # this cluster served it before
    assert back["runtime_start"]["cache"].startswith("warm")
    history = sparkctl("history", "-i", str(inv))
    assert [e["outcome"] for e in history["events"][-3:]] == ["ok", "ok", "ok"]
    assert history["events"][-1]["downtime_seconds"] is not None and history["interrupted"] is None


def test_a_drafter_only_change_restarts_the_drafter_only(lab, inv, tmp_path):
    image = yaml.safe_load(inv.read_text())["runtime"]["image"]
    drafter_image = image.rsplit(":", 1)[0] + ":drafter"
    lab.host_exec("head", ["sh", "-c", f"docker tag {image} {drafter_image} && docker push -q {drafter_image}"], check=True)
    engine = {h: started(lab, h, f"sparkctl-{h}") for h in ("head", "worker")}
    drafter = started(lab, "offload", "sparkctl-drafter")
    new = variant(inv, tmp_path, "drafter", speculative__drafter_image=drafter_image)
    try:
        doc = sparkctl("reload", "-i", str(inv), "--config", str(new), "--yes")
        assert doc["outcome"] == "ok" and doc["plan"]["restart_containers"] == ["sparkctl-drafter"]
        assert {h: started(lab, h, f"sparkctl-{h}") for h in ("head", "worker")} == engine
        assert started(lab, "offload", "sparkctl-drafter") != drafter
        assert httpx.get(f"{URL}/health", timeout=30).status_code == 200
    finally:
        sparkctl("reload", "-i", str(new), "--config", str(inv), "--yes", rc=None)


def test_a_drafter_restart_the_engine_did_not_ride_out_is_rolled_back_naming_it(lab, inv, tmp_path):
    # A drafter image that starts slowly (SIM_FAULTS in the image's own ENV: only the drafter sees it)
    # keeps the head's remote drafter away longer than the engine rides out (the lab's overlay: 3 failed
    # checks 1 s apart): the engine, left running by the drafter-only plan, stops. The reload must not
    # call that done; it is rolled back, and the rollback starts the engine again. (Its modelled load
    # x150 at the lab's SIM_TIME_SCALE: ~6 s to answer /health; x60 answered after 2.3 s, ridden out.)
    before = applied_hash(lab)
    image = yaml.safe_load(inv.read_text())["runtime"]["image"]
    slow = image.rsplit(":", 1)[0] + ":drafter-slow"
    commit = f"id=$(docker create {image}) && docker commit --change 'ENV SIM_FAULTS=slow_start=150' $id {slow} >/dev/null"
    lab.host_exec("head", ["sh", "-c", f"{commit} && docker rm $id >/dev/null && docker push -q {slow}"], check=True)
    new = variant(inv, tmp_path, "slow-drafter", speculative__drafter_image=slow)
    doc = sparkctl("reload", "-i", str(inv), "--config", str(new), "--yes", rc=1)
    assert doc["plan"]["restart_containers"] == ["sparkctl-drafter"]
    assert "the engine stopped serving while the drafter restarted" in doc["reason"], doc["reason"]
    assert_rolled_back(lab, doc, before)


def assert_rolled_back(lab, doc: dict, before_hash: str) -> None:
    assert doc["outcome"] == "rolled back", json.dumps(doc, indent=1)[-3000:]
    assert applied_hash(lab) == before_hash and served_name() == "deepseek-v4.1-flash"
    assert journal(lab) is None
    assert httpx.get(f"{URL}/health", timeout=30).status_code == 200


def test_a_flag_the_runtime_refuses_is_rolled_back(lab, inv, tmp_path):
    before = applied_hash(lab)
    bad = variant(inv, tmp_path, "refused", moe_backend="b12x_experimental", custom_values=["moe_backend"])
    doc = sparkctl("reload", "-i", str(inv), "--config", str(bad), "--yes", rc=1)
    assert "argument --moe-backend: invalid choice" in doc["reason"]  # vLLM's argparse refuses it
    assert_rolled_back(lab, doc, before)


def test_a_config_that_never_becomes_healthy_is_rolled_back_at_the_deadline(lab, inv, tmp_path):
    before = applied_hash(lab)
    env = {**yaml.safe_load(inv.read_text())["runtime"]["env"], "SIM_FAULTS": "hang_start"}
    doc = sparkctl(
        "reload", "-i", str(inv), "--config", str(variant(inv, tmp_path, "hang", env=env)), "--yes", "--deadline", "6", rc=1
    )
    # the engine (or the drafter: env reaches both) never serves; the deadline ends the wait
    assert "not serving after 6 s" in doc["reason"] or "did not answer /health within 6 s" in doc["reason"]
    assert sum(t["end"] - t["start"] for t in doc["timeline"] if t["phase"] == "restart") < 30
    assert_rolled_back(lab, doc, before)


def test_the_marlin_fallback_is_caught_by_the_throughput_ratio_and_rolled_back(lab, inv, tmp_path):
    before = applied_hash(lab)
    # Marlin halves the modelled decode speed. At the lab's SIM_TIME_SCALE a step models ~0.3 ms,
    # no more than the simulator's own CPU per step: on a busy 2-core machine the two runs then
    # measure the same CPU-bound rate (CI: 1.02 x). Five times the step time keeps the measured
    # rate the modelled one, under any load: the new config decodes well under 0.8 x.
    env = {**yaml.safe_load(inv.read_text())["runtime"]["env"], "SIM_STEP_TIME_SCALE": "0.05"}
    marlin = variant(inv, tmp_path, "marlin", moe_backend="marlin", env=env)
    doc = sparkctl("reload", "-i", str(inv), "--config", str(marlin), "--yes", "--min-throughput-ratio", "0.8", rc=1)
    assert "below --min-throughput-ratio 0.8" in doc["reason"] and "MoE backend MARLIN" in doc["reason"]
    assert_rolled_back(lab, doc, before)


def test_a_drafter_that_dies_at_start_up_is_rolled_back_without_waiting_for_the_deadline(lab, inv, tmp_path):
    before = applied_hash(lab)
    env = {**yaml.safe_load(inv.read_text())["runtime"]["env"], "SIM_FAULTS": "fail_start"}  # it exits 1 in warm-up
    new = variant(inv, tmp_path, "drafter-dies", env=env)
    doc = sparkctl("reload", "-i", str(inv), "--config", str(new), "--yes", "--deadline", "120", rc=1)
    assert "the drafter died while starting: sparkctl-drafter on offload exited (code 1" in doc["reason"], doc["reason"]
    assert_rolled_back(lab, doc, before)


def test_the_worker_killed_during_the_restart_is_rolled_back(lab, inv, tmp_path):
    before = applied_hash(lab)
    old_worker = started(lab, "worker", "sparkctl-worker").split()[0]
    p = start("reload", "-i", str(inv), "--config", str(cold(inv, tmp_path)), "--yes")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the new worker container runs: kill it while the head loads
        r = lab.host_exec("worker", ["docker", "inspect", "-f", "{{.Id}} {{.State.Running}}", "sparkctl-worker"])
        new_id, _, running = r.stdout.strip().partition(" ")
        if r.returncode == 0 and new_id != old_worker and running == "true":  # created is not yet killable
            lab.host_exec("worker", ["docker", "kill", "sparkctl-worker"], check=True)
            break
        time.sleep(0.1)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1, err[-2000:]
    doc = json.loads(out)
    assert doc["reason"].startswith("runtime on ")
    assert_rolled_back(lab, doc, before)


def test_a_second_reload_is_refused_by_the_lock_naming_the_holder(lab, inv, tmp_path):
    first = start("reload", "-i", str(inv), "--config", str(cold(inv, tmp_path)), "--yes")
    try:
        deadline = time.monotonic() + 30
        while journal(lab) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        other = variant(inv, tmp_path, "renamed", served_model_name="lab-renamed")
        p = run(["reload", "-i", str(inv), "--config", str(other), "--yes"], timeout=120)
        assert p.returncode == 1 and "locked by" in p.stderr and "reload" in p.stderr, p.stderr
    finally:
        assert first.wait(300) == 0, first.stderr.read()[-2000:]
        sparkctl("reload", "-i", str(inv), "--config", str(inv), "--yes", rc=None)


@pytest.mark.parametrize("phase, then", [("prestage", "resume"), ("drain", "rollback"), ("restart", "resume")])
def test_sigkill_mid_reload_is_reported_and_resume_or_rollback_restores_service(lab, inv, tmp_path, phase, then):
    new = cold(inv, tmp_path)  # the restart phase lasts seconds
    p = start("reload", "-i", str(inv), "--config", str(new), "--yes")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        j = journal(lab)
        if j and j["phase"] == phase:
            break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    # the next command that touches the cluster reports it
    hist = sparkctl("history", "-i", str(inv))
    assert hist["interrupted"]["phase"] == phase
    refused = run(["reload", "-i", str(inv), "--config", str(new), "--yes"], timeout=60)
    assert refused.returncode == 1 and "interrupted reload" in refused.stderr and "--resume" in refused.stderr
    if then == "resume":
        doc = sparkctl("reload", "-i", str(inv), "--config", str(new), "--resume", "--yes")
        assert doc["outcome"] == "ok"
        sparkctl("reload", "-i", str(new), "--config", str(inv), "--yes")
    else:
        doc = sparkctl("rollback", "-i", str(inv), "--yes")
        assert doc["outcome"] == "ok"
    assert journal(lab) is None and httpx.get(f"{URL}/health", timeout=30).status_code == 200
    assert served_name() == "deepseek-v4.1-flash"


def test_requests_in_flight_at_the_drain_finish(lab, inv, tmp_path):
    results: list = []

    engine = f"{URL}/gateway/engine"  # the engine itself (on the head's loopback), through the gateway, never held

    halfway = threading.Event()  # the first stream's first request is half done

    def streams(first: bool) -> None:  # back to back (~2 s of decode each), until the engine stops taking them:
        # in flight whenever the drain begins, however long the reload takes to get there
        body = {"model": "deepseek-v4.1-flash", "prompt": "Count from 1 to 200:", "max_tokens": 20000,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
        while True:
            reason, answered, text = None, False, ""
            try:  # the engine itself (not the gateway, which would hold them): its drain is under test
                with httpx.stream("POST", f"{engine}/v1/completions", json=body, timeout=120) as r:
                    if r.status_code != 200:
                        return results.append(f"refused {r.status_code}")
                    for line in r.iter_lines():
                        answered = True
                        if line.startswith("data: {"):
                            event = json.loads(line[6:])
                            for choice in event["choices"]:  # none in the closing usage event
                                reason, text = choice.get("finish_reason") or reason, text + (choice.get("text") or "")
                            if first and (event.get("usage") or {}).get("completion_tokens", 0) >= body["max_tokens"] // 2:
                                halfway.set()
            except httpx.TransportError as e:  # refused or reset before a byte came back: not let in
                return results.append("refused" if not answered else f"cut: {e!r}")
            if reason == "abort" and not text:  # vLLM 0.33 draining: a new request ends at once, empty
                return results.append("refused: empty abort")
            results.append(reason)

    # the second stream starts halfway through the first's request: the two decode in one batch at
    # one pace, so started together their requests would end, and leave a gap, together (CI met a
    # drain that began with both between requests); half a request apart, one is always in flight
    threads = [threading.Thread(target=streams, args=(i == 0,)) for i in range(2)]
    threads[0].start()
    assert halfway.wait(60), results
    threads[1].start()
    time.sleep(0.3)
    doc = sparkctl(
        "reload", "-i", str(inv), "--config", str(variant(inv, tmp_path, "renamed", served_model_name="lab-renamed")), "--yes"
    )
    for t in threads:
        t.join(120)
    try:
        ran = [r for r in results if not str(r).startswith("refused")]
        assert len(results) - len(ran) == 2 and ran and set(ran) == {"length"}, results  # none cut: the drain let them finish
        # every request in flight when the drain began finished, none cut: both streams' as a rule; one,
        # when the drain began in the gap between one stream's request and its next
        drain = doc["drain"]
        assert drain["in_flight"] in (1, 2) and drain["finished"] == drain["in_flight"] and drain["cut"] == 0, drain
    finally:
        sparkctl("reload", "-i", str(tmp_path / "renamed.yaml"), "--config", str(inv), "--yes", rc=None)
