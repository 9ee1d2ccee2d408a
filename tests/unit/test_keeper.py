"""The keeper's decisions (sparkctl/keeper/policy.py) and its install step's plans (steps/keeper.py),
from facts parsed by the fact layer. The log lines are the simulator's (docs/simulator.md "Failure
modes", which docs/conformance.md ties to vLLM 0.33's format strings); the docker inspect documents
are made up in docker's shape."""

from __future__ import annotations

import json

from hostfacts import host_facts, inventory, sec

from sparkctl.facts.keeper import parse_unit
from sparkctl.facts.logs import parse_scan
from sparkctl.keeper.policy import CrashLoop, Gone, Grace, cause_of, first_cause, gone
from sparkctl.launch import keeper as unit
from sparkctl.steps import keeper_files
from sparkctl.steps.base import RunContext, StepOptions
from sparkctl.steps.keeper import KeeperStep

ASSERT_LINES = (
    "(RayWorkerWrapper pid=211) torch.AcceleratorError: CUDA error: device-side assert triggered\n"
    "ERROR 12-05 10:00:01 [core.py:1010] EngineCore encountered a fatal error.\n"
)
NCCL_LINES = (
    "(Worker_TP0) WorkerProc hit an exception.\n"
    "RuntimeError: NCCL error: remote process exited or there was a network error\n"
    "ERROR [core.py:1010] EngineCore encountered a fatal error.\n"
)


def containers(host: str, **states: tuple[str, int, bool]) -> list:
    """name -> (status, exit code, OOMKilled) as `docker inspect` prints them (made up)."""
    docs = [{"Id": f"id-{n}", "Name": f"/{n}", "State": {"Status": s, "ExitCode": code, "OOMKilled": oom},
             "Config": {"Image": "img", "Labels": {}}, "Image": "sha256:x"} for n, (s, code, oom) in states.items()]  # fmt: skip
    return host_facts(inventory(), host, containers=sec(json.dumps(docs))).containers


def logs(cid: str, text: str):
    return parse_scan(f"@@ctr {cid}\n{text}")[cid]


def test_what_the_log_names_is_the_cause_and_its_lines_are_kept():
    (g,) = gone([("head", "sparkctl-head")], {"head": containers("head", **{"sparkctl-head": ("exited", 1, False)})})
    c = cause_of(g, logs("id-sparkctl-head", ASSERT_LINES))
    assert (c.kind, c.exit_code) == ("device-side assert", 1)
    assert "device-side assert triggered" in c.lines[0]
    assert cause_of(g, logs("id-sparkctl-head", NCCL_LINES)).kind == "NCCL error"
    # no telling line: how it ended
    assert cause_of(g, None).kind == "exited"
    assert c.summary() == "sparkctl-head on head: device-side assert, exit 1"


def test_a_kill_an_oom_and_a_removed_container_are_told_apart():
    found = {"head": containers("head", **{"sparkctl-head": ("exited", 137, False)}),
             "worker": containers("worker", **{"sparkctl-worker": ("exited", 137, True)})}  # fmt: skip
    missing = gone([("head", "sparkctl-head"), ("worker", "sparkctl-worker"), ("offload", "sparkctl-drafter")], found)
    kinds = [cause_of(g, None).kind for g in missing]
    assert kinds == ["killed", "OOM", "removed"]
    # the head's exit is often the echo of the worker's end: the named cause leads
    assert first_cause([cause_of(g, None) for g in missing]).container == "sparkctl-worker"


def test_a_killed_head_is_the_cause_not_its_worker_that_exited_with_it():
    found = {"head": containers("head", **{"sparkctl-head": ("exited", 137, False)}),
             "worker": containers("worker", **{"sparkctl-worker": ("exited", 1, False)})}  # fmt: skip
    missing = gone([("worker", "sparkctl-worker"), ("head", "sparkctl-head")], found)
    c = first_cause([cause_of(g, None) for g in missing])
    assert (c.container, c.kind, c.exit_code) == ("sparkctl-head", "killed", 137)


LOST_LINES = {  # the head's engine when the worker's rank or the remote drafter went (the simulator's)
    "worker": "ERROR 12-05 10:00:01 [ray_executor_v2.py:522] RayWorkerProc rank=[1] died unexpectedly, shutting down executor.\n",
    "offload": (
        "ERROR 12-05 10:00:01 [simulator] Remote drafter at http://10.0.0.4:8100 is unreachable: 3 failed health checks\n"
        "ConnectionError: remote drafter http://10.0.0.4:8100 unreachable\n"
        "ERROR 12-05 10:00:01 [core.py:1010] EngineCore encountered a fatal error.\n"
    ),
}


def test_a_killed_worker_or_drafter_is_the_cause_not_the_head_that_logged_its_loss():
    for name, host in (("sparkctl-worker", "worker"), ("sparkctl-drafter", "offload")):
        found = {"head": containers("head", **{"sparkctl-head": ("exited", 1, False)}),
                 host: containers(host, **{name: ("exited", 137, False)})}  # fmt: skip
        missing = gone([("head", "sparkctl-head"), (host, name)], found)
        causes = [cause_of(g, logs("id-sparkctl-head", LOST_LINES[host]) if g.host == "head" else None) for g in missing]
        assert [c.kind for c in causes] == ["worker lost" if host == "worker" else "engine fatal error", "killed"]
        assert (first_cause(causes).container, first_cause(causes).exit_code) == (name, 137)
    # what the container's own log names beats a kill elsewhere
    found = {"head": containers("head", **{"sparkctl-head": ("exited", 1, False)}),
             "worker": containers("worker", **{"sparkctl-worker": ("exited", 137, False)})}  # fmt: skip
    missing = gone([("worker", "sparkctl-worker"), ("head", "sparkctl-head")], found)
    causes = [cause_of(g, logs("id-sparkctl-head", ASSERT_LINES) if g.host == "head" else None) for g in missing]
    assert first_cause(causes).kind == "device-side assert"


class StoppedContainer:
    """docker-py's Container as far as a stop's timing reads it: reload() and attrs (docker inspect's shape)."""

    def __init__(self, exit_code: int, stop_timeout: int = 25):
        self.attrs = {"State": {"ExitCode": exit_code, "OOMKilled": False}, "Config": {"StopTimeout": stop_timeout}}

    def reload(self) -> None:
        pass


def test_a_stop_that_docker_had_to_kill_is_said_so_with_its_time():
    from sparkctl.runtime.containers import stop_line, stop_timing

    t = stop_timing(StoppedContainer(137), 25.3, None)
    assert t == {"seconds": 25.3, "timeout_s": 25, "exit_code": 137, "killed": True}
    assert stop_line("sparkctl-head", t).startswith("sparkctl-head KILLED after 25.3 s")
    t = stop_timing(StoppedContainer(0), 3.9, 10)
    assert not t["killed"] and t["timeout_s"] == 10
    assert stop_line("sparkctl-head", t) == "sparkctl-head stopped in 3.9 s (exit 0)"


def test_running_containers_are_not_gone():
    found = {"head": containers("head", **{"sparkctl-head": ("running", 0, False)})}
    assert gone([("head", "sparkctl-head")], found) == []
    assert gone([("head", "sparkctl-head")], {}) == [Gone("head", "sparkctl-head", None)]


def test_grace_waits_its_seconds_and_starts_again_when_it_comes_back():
    g = Grace(10)
    assert not g.due(True, 100) and not g.due(True, 109)
    assert g.due(True, 110)
    assert not g.due(False, 111)  # back by itself: nothing to do
    assert not g.due(True, 112) and g.due(True, 122)


def test_the_crash_loop_limit_counts_recoveries_within_the_window():
    loop = CrashLoop(limit=3, window=600)
    for t in (0, 100, 200):
        assert not loop.exhausted(t)
        loop.recovered_at(t)
    assert loop.exhausted(300)  # a fourth within 600 s: a loop
    assert not loop.exhausted(601)  # the first has aged out


# --- the install step ----------------------------------------------------------------------------


def unit_section(command="/usr/local/bin/sparkctl", systemctl="/usr/bin/systemctl", enabled="not-found",
                 active="inactive", sums=None, pub=""):  # fmt: skip
    sums = sums or {}
    lines = [f"command {command}", f"systemctl {systemctl}", f"enabled {enabled}", f"active {active}"]
    lines += [f"sum {p} {sums.get(p, '')}" for p in (unit.UNIT_PATH, unit.INVENTORY, unit.KNOWN_HOSTS)]
    return sec("\n".join(lines + [f"pub {pub}"]) + "\n")


def plans(inv, head_unit, auth=None, **options):
    auth = auth or {}
    facts = {h: host_facts(inv, h, keeper_auth=sec(auth.get(h, ""))) for h in inv.hosts}
    facts["head"] = host_facts(inv, "head", keeper_unit=head_unit, keeper_auth=sec(auth.get("head", "")))
    step = KeeperStep()
    step.options = StepOptions(**options)
    return step.plan(RunContext(inventory=inv, fleet=None, facts=facts))


def enabled_lab():
    return inventory().model_copy(update={"keeper": inventory().keeper.model_copy(update={"enabled": True})})


def test_a_fresh_head_gets_key_files_and_unit_and_every_host_the_key():
    inv = enabled_lab()
    p = plans(inv, unit_section())
    assert [c.action for c in p["head"].changes] == ["keygen", "authorize", "write", "write", "enable"]
    assert [c.action for c in p["worker"].changes] == ["authorize"]
    assert [c.action for c in p["offload"].changes] == ["authorize"]


def test_an_installed_keeper_is_left_alone_and_a_changed_file_restarts_it():
    inv = enabled_lab()
    pub = "ssh-ed25519 AAAA sparkctl-keeper@lab"
    step = KeeperStep()
    files = step.files(RunContext(inventory=inv, fleet=None), "/usr/local/bin/sparkctl")
    sums = {p: keeper_files.digest(t) for p, t in files.items()}
    auth = {h: pub for h in inv.hosts}
    p = plans(inv, unit_section(enabled="enabled", active="active", sums=sums, pub=pub), auth)
    assert all(pl.empty for pl in p.values()), {h: pl.reason for h, pl in p.items()}
    sums[unit.INVENTORY] = "0" * 64
    p = plans(inv, unit_section(enabled="enabled", active="active", sums=sums, pub=pub), auth)
    assert [c.action for c in p["head"].changes] == ["write", "enable"]


def test_down_and_a_disabled_keeper_remove_unit_and_keys():
    pub = "ssh-ed25519 AAAA sparkctl-keeper@lab"
    installed = unit_section(enabled="enabled", active="active", sums={unit.UNIT_PATH: "1" * 64}, pub=pub)
    auth = {h: pub for h in ("head", "worker", "offload")}
    for p in (plans(enabled_lab(), installed, auth, remove=True), plans(inventory(), installed, auth)):
        assert [c.action for c in p["head"].changes] == ["deauthorize", "remove"]
        assert [c.action for c in p["worker"].changes] == ["deauthorize"]
    assert all(pl.empty for pl in plans(inventory(), unit_section()).values())


def test_a_head_without_systemd_or_sparkctl_blocks_with_the_way_out():
    p = plans(enabled_lab(), unit_section(systemctl=""))
    assert "no systemctl on head" in p["head"].blocked and "keeper.enabled: false" in p["head"].blocked
    p = plans(enabled_lab(), unit_section(command=""))
    assert "`sparkctl` is not on head's PATH" in p["head"].blocked


def test_the_unit_runs_the_keeper_on_the_inventory_that_reaches_hosts_with_the_heads_key():
    inv = enabled_lab()
    text = keeper_files.render_unit(inv, "/usr/local/bin/sparkctl")
    assert f"ExecStart=/usr/local/bin/sparkctl keeper run -i {unit.INVENTORY}" in text
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text
    import yaml

    doc = yaml.safe_load(keeper_files.keeper_inventory(inv))
    assert doc["ssh_defaults"]["key"] == unit.KEY and doc["ssh_defaults"]["known_hosts"] == unit.KNOWN_HOSTS
    assert doc["hosts"]["worker"]["ssh"] == {"address": "10.231.0.12", "user": "root", "port": 22}


def test_the_unit_fact_reads_what_the_probe_prints():
    u = parse_unit(unit_section(enabled="enabled", active="active", pub="ssh-ed25519 AAAA c").out)
    assert (u.command, u.systemctl, u.enabled, u.active, u.public_key) == (
        "/usr/local/bin/sparkctl", True, "enabled", "active", "ssh-ed25519 AAAA c")  # fmt: skip
    assert not parse_unit(unit_section(command="", systemctl="").out).systemctl
