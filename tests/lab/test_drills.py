"""Every drill end to end: break the lab, doctor names the runbook's check, the runbook's own
confirm/fix/verify commands (its fenced code blocks, run as written) repair it, doctor is clean
and the runtime serves again. A runbook with fix commands and no drill fails here too.

While a drill is in effect, a real Prometheus in the lab (scraping the runtime with the rules
`sparkctl alerts` writes) must show each alert the drill names `firing` in /api/v1/alerts.

Also doctor's default output at 80 columns on a one-fault lab (the wrong-MTU drill) and on the
healthy lab after the fix: the wrong-mtu drill's own doctor runs.

The drills share one converged, serving lab (the `serving` module fixture). After each drill the lab
must be as the drill found it (drills.snapshot(): links, containers and their config, images, lock,
journal, Engram mount, loads): a repaired drill that leaves a change fails loudly, and the lab is
converged again for the next one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from labcli import URL, run

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "docs" / "runbooks"
FENCE = "127.0.0.0/8,10.231.0.0/16"
HEAD = URL  # this lab's head (SPARKCTL_LAB_INSTANCE moves the addresses)
# Runbooks with no drill yet, and why (the lab cannot break it the way the page describes).
NOT_DRILLED: dict[str, str] = {
    # the lab's inventory has a `weights` section, so `up` places the model and weights.present only
    # warns there; it fails where no section places it (tests/unit/test_step_weights.py)
    "weights.present": "needs an inventory without `weights`",
    # the lab's inventory runs without the keeper (drills break things on purpose and would race it);
    # tests/lab/test_keeper_lab.py turns it on and drives the crash loop this runbook is for
    "keeper.state": "needs the keeper on: tests/lab/test_keeper_lab.py",
}


def env(inventory: Path) -> dict:
    """The runbooks' shell: `sparkctl` is this venv's console script, as an operator's shell runs it."""
    return {**os.environ, "SPARKCTL_INVENTORY": str(inventory), "SPARKCTL_ONLY_NETWORKS": FENCE,
            "PATH": ":".join([str(Path(sys.executable).parent), os.environ["PATH"]]), "COLUMNS": "80"}  # fmt: skip


def blocks(runbook: str) -> dict[str, list[str]]:
    """The runbook's `sh confirm`, `sh fix` and `sh verify` code blocks."""
    text = (RUNBOOKS / f"{runbook}.md").read_text()
    out: dict[str, list[str]] = {"confirm": [], "fix": [], "verify": []}
    for kind, body in re.findall(r"^```sh (confirm|fix|verify)\n(.*?)^```", text, re.M | re.S):
        out[kind].append(body)
    return out


def sh(script: str, inventory: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=env(inventory), cwd=REPO)  # fmt: skip


def doctor_json(inventory: Path, *args: str) -> dict:
    return json.loads(run(["doctor", "-i", str(inventory), "--json", *args], timeout=300, env=env(inventory)).stdout)


def not_ok(doc: dict) -> dict[tuple[str, str], dict]:
    return {(c["name"], c["host"]): c for c in doc["checks"] if c["status"] in ("failed", "warn")}


def failing(doc: dict) -> set[tuple[str, str]]:
    return {(c["name"], c["host"]) for c in doc["checks"] if c["status"] == "failed"}


def serves() -> bool:
    try:
        r = httpx.post(f"{HEAD}/v1/chat/completions", timeout=30, trust_env=False,
                       json={"model": "deepseek-v4.1-flash", "messages": [{"role": "user", "content": "Count from 1 to 5."}],
                             "max_tokens": 20})  # fmt: skip
        return r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    except httpx.HTTPError:
        return False


@contextmanager
def traffic():
    """One stream of code requests, back to back, until the block ends (what decode speed needs)."""
    stop = threading.Event()

    def loop():
        with httpx.Client(base_url=HEAD, timeout=30, trust_env=False) as c:
            while not stop.is_set():
                try:
                    c.post(
                        "/v1/chat/completions",
                        json={
                            "model": "deepseek-v4.1-flash",
                            "max_tokens": 300,
                            "ignore_eos": True,
                            "messages": [{"role": "user", "content": "Write a python function that merges two sorted lists."}],
                        },
                    )
                except httpx.HTTPError:
                    time.sleep(0.2)  # the runtime is restarting

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=60)


from sparkctl_lab.prometheus import LAB_ALERTS  # noqa: E402

WINDOW = int(LAB_ALERTS["rate_window"].rstrip("s"))  # the lab's rate window: its rules judge over this
SPEED = (
    f'sum(rate(vllm:generation_tokens_total{{job="sparkctl-lab",role="head"}}[{WINDOW}s])) / '
    f'sum(rate(vllm:request_decode_time_seconds_sum{{job="sparkctl-lab",role="head"}}[{WINDOW}s]))'
)
FIRED: dict[str, list[str]] = {}  # drill -> alerts seen firing (printed at the end with -s)


def up(inventory: Path) -> None:
    r = sh("sparkctl up --json", inventory)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def doctor_human(inventory: Path, *args: str) -> subprocess.CompletedProcess:
    """`sparkctl doctor` as a person runs it: the default output at 80 columns."""
    return run(["doctor", *args], timeout=300, env=env(inventory))


def named(out: str, check: str, host: str) -> bool:
    """Does doctor's default output expand `check` (failing or warning) on `host`?"""
    return any(re.match(rf"[✗!] {re.escape(check)}  on (.*)", line) and host in re.split(r"[ ,]+", line.split("  on ", 1)[1])
               for line in out.splitlines())  # fmt: skip


@pytest.fixture(scope="module")
def serving(lab):
    """The lab converged by `sparkctl up` and serving, and what doctor fails on it before any drill
    (nothing, on a clean tree: a drill must leave no failure that was not there before it).
    Prometheus runs with the lab's rules; the decode baseline is measured here, as `sparkctl bench`
    would record it, before any drill."""
    inventory = Path(lab.INVENTORY_PATH)
    up(inventory)
    assert serves()
    lab.prometheus.up()
    with traffic():
        deadline = time.monotonic() + 90
        while not (result := lab.prometheus.query(SPEED)) and time.monotonic() < deadline:
            time.sleep(2)
        time.sleep(WINDOW + 2)  # a full window of healthy decoding
        result = lab.prometheus.query(SPEED)
    assert result, "Prometheus has no decode speed: is it scraping the head?"
    baseline = float(result[0]["value"][1])
    # the lab serves 100x faster (SIM_STEP_TIME_SCALE 0.01): a 30 s p99 TTFT on a Spark is 0.3 s here
    lab.prometheus.up(alerts={"decode_tokens_per_s_baseline": round(baseline, 1), "ttft_p99_seconds": 0.3})
    yield lab, inventory, failing(doctor_json(inventory)), lab.drills.snapshot()
    lab.prometheus.down()  # a second-by-second scraper has no business outliving the test
    print("\nalerts seen firing per drill:", json.dumps(FIRED, indent=1))


@pytest.fixture
def drill_lab(serving, request):
    """The serving lab; afterwards faults cleared and the lab as the drill found it. A drill that
    passed but left the lab changed fails here, naming what changed; either way the lab is
    converged again so the next drill starts from the same state."""
    lab, inventory, before, shape = serving
    yield lab, inventory, before
    call = getattr(request.node, "reports", {}).get("call")
    passed = call is not None and call.passed
    lab.drills.stop_load()  # the drill's clients go; what else differs, the drill left (faults not cleared yet)
    changed = lab.drills.changes(shape, lab.drills.snapshot())
    lab.clear_faults()
    if not passed or changed or not serves():
        up(inventory)  # a failed drill must not break the next test
    if passed:  # (a failed one has already said what went wrong)
        assert not changed, "the drill left the lab changed after its repair:\n" + "\n".join(changed)


@contextmanager
def _nothing():
    yield


def drill_names() -> list[str]:
    from sparkctl_lab import drills

    return list(drills.DRILLS)


def test_every_runbook_with_commands_has_a_drill():
    from sparkctl_lab import drills

    drilled = {d.runbook for d in drills.DRILLS.values()}
    with_fix = {p.stem for p in RUNBOOKS.glob("*.md") if blocks(p.stem)["fix"]}
    assert with_fix - drilled <= set(NOT_DRILLED), with_fix - drilled - set(NOT_DRILLED)
    for d in drills.DRILLS.values():
        b = blocks(d.runbook)
        assert b["confirm"] and b["fix"] and b["verify"], f"{d.runbook}.md needs confirm, fix and verify blocks"
    assert not drilled & set(NOT_DRILLED)


@pytest.mark.parametrize("name", drill_names())
def test_drill_end_to_end(drill_lab, name):
    from sparkctl_lab import drills

    lab, inventory, before = drill_lab
    d = drills.DRILLS[name]
    assert (d.check, d.host) not in before
    r = subprocess.run([sys.executable, "-m", "sparkctl", "lab", "drill", name, "--json"], capture_output=True, text=True,
                       timeout=600, env=env(inventory))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["runbook"] == f"docs/runbooks/{d.runbook}.md"

    # doctor's default output names the check on its host and links the runbook
    # (the rails' bandwidth probe, a second per sibling group, only where the drill is about it)
    unprobed = () if d.check == "fabric.bandwidth" else ("--ignore", "fabric.bandwidth")
    deadline = time.monotonic() + 30
    while not named((human := doctor_human(inventory, *unprobed)).stdout, d.check, d.host) and time.monotonic() < deadline:
        time.sleep(1)
    assert named(human.stdout, d.check, d.host), human.stdout + human.stderr
    assert f"runbook: sparkctl runbook {d.runbook}" in re.sub(r"\s+", " ", human.stdout), human.stdout + human.stderr

    # the runbook's own commands: confirm while broken (meanwhile the alerts' `for:` runs); the
    # one-fault output's --json twin beside them (both only read; it probes no rail, so the confirm's
    # probe has the rails to itself)
    b = blocks(d.runbook)
    with ThreadPoolExecutor(1) as pool:
        fabric = (
            pool.submit(doctor_json, inventory, "--only", "fabric", "--ignore", "fabric.bandwidth")
            if name == "wrong-mtu"
            else None
        )
        for script in b["confirm"]:
            out = sh(script, inventory)
            assert d.check in out.stdout + out.stderr, (script, out.stderr[-2000:])
        if fabric is not None:
            one_fault_output_fits_80_columns(human, fabric.result())

    # the alerts it names fire in Prometheus (decode speed needs traffic to be judged)
    with traffic() if "SparkctlDecodeThroughputLow" in d.alerts else _nothing():
        for alert in d.alerts:
            fired = lab.prometheus.wait_firing(alert, timeout=150)
            assert fired["annotations"]["runbook"].startswith("sparkctl runbook ")  # the lab publishes no base URL
            FIRED.setdefault(name, []).append(alert)

    # then hands where the page needs them (power the host back on, the cable back in); then the
    # runbook's fix and verify
    lab.drills.hands(name)
    for script in b["fix"]:
        out = sh(script, inventory)
        assert out.returncode == 0, (script, out.stdout[-2000:], out.stderr[-2000:])
    for script in b["verify"]:
        out = sh(script, inventory)
        assert out.returncode == 0, (script, out.stdout[-2000:], out.stderr[-2000:])

    # the check is ok again (a warning is not a repair), doctor as clean as before the drill, serving.
    # The rails' bandwidth probe (a second of traffic per sibling group) only after a drill of the
    # fabric whose verify did not probe them (exit 0: fabric.bandwidth did not fail): a drill that
    # touched no rail cannot have changed what they carry (drills.snapshot() holds their links)
    probed = any(map(probes_rails, b["verify"])) or not d.check.startswith("fabric.")
    after = doctor_json(inventory, *(("--ignore", "fabric.bandwidth") if probed else ()))
    assert (d.check, d.host) not in not_ok(after), not_ok(after)[(d.check, d.host)]
    assert failing(after) <= before
    # and it answers a person's request (the drill's own clients gone: behind 48 of them a request
    # waits its turn for half a minute, which the runbook's verify has already seen served)
    lab.drills.stop_load()
    assert serves()
    if name == "wrong-mtu":
        healthy_output_fits_80_columns(inventory, before)


def probes_rails(script: str) -> bool:
    """Does a runbook block run a doctor that probes the rails' bandwidth (no --only, or an --only
    naming fabric, and fabric.bandwidth not ignored)?"""
    for line in script.splitlines():
        if re.match(r"\s*sparkctl doctor\b", line) and "fabric.bandwidth" not in line:
            only = re.search(r"--only[ =](\S+)", line)
            if only is None or "fabric" in only.group(1).split(","):
                return True
    return False


def test_which_runbook_blocks_probe_the_rails():
    assert probes_rails("sparkctl doctor --only fabric") and probes_rails("sparkctl doctor\nsparkctl status")
    assert probes_rails("sparkctl doctor --only=ssh,fabric --json")
    assert not probes_rails("sparkctl doctor --only runtime\nsparkctl status")
    assert not probes_rails("sparkctl doctor --only fabric --ignore fabric.bandwidth") and not probes_rails("sparkctl up")


def one_fault_output_fits_80_columns(r: subprocess.CompletedProcess, doc: dict) -> None:
    """Doctor's default output on the one-fault lab (a rail at MTU 1500): exit 1, nothing past 80
    columns, the failure expanded with its message, fix and runbook. `doc`: `doctor --json --only
    fabric --ignore fabric.bandwidth` on the same lab (the fabric group says the same of fabric.mtu
    as the whole doctor; the bandwidth probe's seconds add nothing to it)."""
    assert r.returncode == 1
    lines = r.stdout.rstrip().splitlines()
    print("\n".join(lines))  # the one-fault output, for the record (-s)
    assert max(len(line) for line in lines) <= 80
    text = re.sub(r"\s+", " ", r.stdout)
    # its message and fix, as --json gives them
    mtu = next(c for c in doc["checks"] if c["name"] == "fabric.mtu" and c["status"] == "failed")
    assert any(line.startswith("✗ fabric.mtu ") for line in lines)
    assert re.sub(r"\s+", " ", mtu["message"]) in text and re.sub(r"\s+", " ", mtu["fix"]) in text
    assert "runbook: sparkctl runbook fabric.mtu" in text


def healthy_output_fits_80_columns(inventory: Path, before: set) -> None:
    """Doctor's default output on the healthy lab after the fix: short, 80 columns, no fabric.mtu."""
    r = doctor_human(inventory)
    lines = r.stdout.rstrip().splitlines()
    print("\n".join(lines))
    assert r.returncode == (1 if before else 0) and len(lines) <= 40, r.stdout + r.stderr
    assert max(len(line) for line in lines) <= 80 and "fabric.mtu" not in r.stdout
