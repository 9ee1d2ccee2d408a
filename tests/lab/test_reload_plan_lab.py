"""`reload --check` is the run: for each case, the containers `reload --check --json` says restart
are exactly those whose container the following `reload --yes --json` replaced (docker's container
ID and start time, read on the hosts before and after), and the operations it lists per host and
step are those the run performed.

One converged cluster for the module; each case restores what it changed, by a reload that is
itself compared the same way. (The file is not named test_reload_plan.py: tests/unit/ holds one
of that name, and pytest imports test files by their basename.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from labcli import sparkctl, variant

pytestmark = pytest.mark.lab

CONTAINERS = {"sparkctl-head": "head", "sparkctl-worker": "worker", "sparkctl-drafter": "offload"}


@pytest.fixture(scope="module")
def inv(lab) -> Path:
    path = Path(lab.INVENTORY_PATH)
    sparkctl("up", "-i", str(path))
    return path


@pytest.fixture(autouse=True)
def restored(lab, inv):
    """Whatever a test's outcome, the next one starts from the inventory's config (a reload back
    to it: nothing to do when the test restored it already)."""
    yield
    sparkctl("reload", "-i", str(inv), "--config", str(inv), "--yes", rc=None)


def started(lab) -> dict[str, str]:
    """Each runtime container's ID and start time, read on its host."""
    out = {}
    for name, host in CONTAINERS.items():
        r = lab.host_exec(host, ["docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", name], check=True)
        out[name] = r.stdout.strip()
    return out


def operations(results: list[dict]) -> dict[tuple[str, str], list[str]]:
    return {(r["host"], r["step"]): r["operations"] for r in results if r["operations"]}


def check_then_reload(lab, current: Path, new: Path) -> tuple[dict, list[str]]:
    """`reload --check` then the reload itself; asserts the check named exactly what the run
    restarted and did. Returns the check's plan and the containers the run replaced."""
    before = started(lab)
    check = sparkctl("reload", "-i", str(current), "--config", str(new), "--check")
    assert started(lab) == before  # --check restarts nothing
    run = sparkctl("reload", "-i", str(current), "--config", str(new), "--yes")
    assert run["outcome"] in ("ok", "nothing to do"), json.dumps(run, indent=1)[-3000:]
    after = started(lab)
    replaced = sorted(n for n in CONTAINERS if after[n] != before[n])
    assert sorted(check["plan"]["restart_containers"]) == replaced, (check["plan"], replaced)
    assert run["plan"]["restart_containers"] == check["plan"]["restart_containers"]
    assert operations(check["results"]) == operations(run["results"])
    return check["plan"], replaced


def test_a_drafter_only_change_and_back(lab, inv, tmp_path):
    image = yaml.safe_load(inv.read_text())["runtime"]["image"]
    drafter_image = image.rsplit(":", 1)[0] + ":drafter"
    lab.host_exec("head", ["sh", "-c", f"docker tag {image} {drafter_image} && docker push -q {drafter_image}"], check=True)
    new = variant(inv, tmp_path, "drafter", runtime__speculative__drafter_image=drafter_image)
    plan, replaced = check_then_reload(lab, inv, new)
    assert replaced == ["sparkctl-drafter"] and plan["prediction"] is None
    _, replaced = check_then_reload(lab, new, inv)  # back: the drafter again
    assert replaced == ["sparkctl-drafter"]


def test_an_engine_change_and_back(lab, inv, tmp_path):
    new = variant(inv, tmp_path, "renamed", runtime__served_model_name="lab-renamed")
    plan, replaced = check_then_reload(lab, inv, new)
    assert replaced == ["sparkctl-head", "sparkctl-worker"] and plan["prediction"] == "warm"
    _, replaced = check_then_reload(lab, new, inv)  # back: the engine again
    assert replaced == ["sparkctl-head", "sparkctl-worker"]


def test_a_change_no_container_sees_restarts_nothing(lab, inv, tmp_path):
    new = variant(inv, tmp_path, "alerts", alerts__ttft_p99_seconds=0.4)
    plan, replaced = check_then_reload(lab, inv, new)
    assert replaced == [] and [c["field"] for c in plan["changes"]] == ["alerts.ttft_p99_seconds"]
    assert plan["prediction"] is None
    # it is recorded as applied: the same config again is nothing to diff (it was diffed again, forever)
    again = sparkctl("reload", "-i", str(new), "--config", str(new), "--check")
    assert again["plan"]["changes"] == [], again["plan"]
    _, replaced = check_then_reload(lab, new, inv)
    assert replaced == []


def _image(lab, host: str, ref: str) -> str:
    return lab.host_exec(host, ["docker", "image", "inspect", "-f", "{{.Id}}", ref], check=True).stdout.strip()


def test_the_registrys_tag_moved_to_a_new_image(lab, inv):
    """The same config again, but the registry's tag now names a newer image (built on the head
    and pushed; the other nodes have not pulled it): every container that runs the tag restarts."""
    image = yaml.safe_load(inv.read_text())["runtime"]["image"]
    old = _image(lab, "head", image)
    build = f"printf 'FROM {image}\\nLABEL io.sparkctl.test=moved\\n' | docker build -q -t {image} - && docker push -q {image}"
    lab.host_exec("head", ["sh", "-c", build], check=True)
    try:
        _, replaced = check_then_reload(lab, inv, inv)
        assert replaced == sorted(CONTAINERS)
    finally:  # the lab's own image back under the tag, in the registry and on the head
        lab.host_exec("head", ["sh", "-c", f"docker tag {old} {image} && docker push -q {image}"], check=True)
    _, replaced = check_then_reload(lab, inv, inv)  # the tag moved back: again everything restarts
    assert replaced == sorted(CONTAINERS)


def test_a_node_whose_tag_names_another_image_than_its_container_runs(lab, inv):
    """The worker's tag re-pointed by hand to an image the registry does not name: the run pulls the
    registry's image back under the tag, which is the one the worker's container runs, so nothing
    restarts (the check must not plan a restart from the stray image)."""
    image = yaml.safe_load(inv.read_text())["runtime"]["image"]
    old = _image(lab, "worker", image)
    stray = f"printf 'FROM {image}\\nLABEL io.sparkctl.test=stray\\n' | docker build -q -t {image} -"
    lab.host_exec("worker", ["sh", "-c", stray], check=True)
    try:
        plan, replaced = check_then_reload(lab, inv, inv)
        assert replaced == [] and plan["restart_containers"] == []
        assert _image(lab, "worker", image) == old  # the run did repair the tag
    finally:
        lab.host_exec("worker", ["docker", "tag", old, image], check=True)
