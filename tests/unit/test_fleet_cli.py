"""`sparkctl fleet up|status|doctor|history` without a lab: a bad fleet file stops every command
before any host is touched (exit 2, the field named), the help texts, the fleet checks judged from
what the door's host answered, the probe the door's host runs (real bash and curl against loopback
servers), the history's merge, and the tables drawn from a recorded `fleet status --json`."""

from __future__ import annotations

import copy
import http.server
import io
import json
import subprocess
import threading
from pathlib import Path

import pytest
from climain import run
from rich.console import Console
from test_fleet_model import FLEET, LAB, _write, second_pair

from sparkctl.checks.fleet import FleetContext
from sparkctl.cli.fleet import print_history, print_status
from sparkctl.fleet.doctor import fleet_checks, probe_command
from sparkctl.fleet.history import merge_events
from sparkctl.fleet.model import load_fleet
from sparkctl_lab.sim import harness

RECORDED = Path(__file__).resolve().parent / "recorded" / "fleet"
COMMANDS = ["up", "status", "doctor", "history"]


def _fleet(tmp_path, second: dict | None = None, first: dict | None = None) -> Path:
    return _write(tmp_path, FLEET, {"inventory.yaml": first or LAB, "inventory-2.yaml": second or second_pair(LAB)})


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_member_stops_every_command_before_any_host_with_the_field_named(tmp_path, capsys, command):
    bad = second_pair(LAB)
    bad["runtime"]["max_num_seqs"] = 0
    path = _fleet(tmp_path, bad)
    code, out, err = run(["fleet", command, "-f", str(path)], capsys)
    assert code == 2
    assert "members[1].inventory" in err and "inventory-2.yaml" in err and "max_num_seqs" in err
    # nothing ran: no member's progress line, no table, no SSH failure
    assert out == "" and "lab:" not in err and "lab-2:" not in err and "unreachable" not in err


def test_a_bad_fleet_file_with_json_is_one_error_document(tmp_path, capsys):
    doc = copy.deepcopy(FLEET)
    doc["front_door"]["port"] = 8888  # the door member's runtime.port
    path = _write(tmp_path, doc, {"inventory.yaml": LAB, "inventory-2.yaml": second_pair(LAB)})
    code, out, err = run(["fleet", "status", "-f", str(path), "--json"], capsys)
    assert code == 2
    error = json.loads(out)
    assert error["exit_code"] == 2 and "front_door.port" in error["error"] and "runtime.port" in error["error"]


def test_a_door_host_on_a_members_port_stops_fleet_up_before_any_host(tmp_path, capsys):
    doc = copy.deepcopy(FLEET)
    doc["front_door"] = {"host": {"address": "10.231.0.13", "user": "root"}, "image": "x/y:1", "port": 8100}
    path = _write(tmp_path, doc, {"inventory.yaml": LAB, "inventory-2.yaml": second_pair(LAB)})
    code, out, err = run(["fleet", "up", "-f", str(path)], capsys)
    assert code == 2 and out == ""
    assert "front_door.port" in err and "drafter_port on 10.231.0.13 (host offload of member lab)" in err
    assert "lab:" not in err and "front door:" not in err  # nothing ran


def test_no_fleet_file_names_both_ways_to_give_one(capsys, monkeypatch):
    monkeypatch.delenv("SPARKCTL_FLEET", raising=False)
    code, _, err = run(["fleet", "doctor"], capsys)
    assert code == 2 and "-f/--fleet FILE" in err and "$SPARKCTL_FLEET" in err


def test_the_fleet_file_comes_from_the_environment_too(tmp_path, capsys, monkeypatch):
    bad = second_pair(LAB)
    bad["cluster"]["name"] = "lab"
    monkeypatch.setenv("SPARKCTL_FLEET", str(_fleet(tmp_path, bad)))
    code, _, err = run(["fleet", "history"], capsys)
    assert code == 2 and "cluster name 'lab' is also member 0's" in err


def test_help_lists_the_commands_and_each_takes_the_fleet_file(capsys):
    code, out, _ = run(["fleet", "--help"], capsys)
    assert code == 0
    assert all(f"  {c} " in out for c in COMMANDS)
    for command in COMMANDS:
        code, out, _ = run(["fleet", command, "--help"], capsys)
        assert code == 0 and "-f, --fleet" in out and "SPARKCTL_FLEET" in out, command
        assert "--json" in out, command
    _, out, _ = run(["fleet", "up", "--help"], capsys)
    assert "--check" in out and "sparkctl up -i MEMBER.yaml" in " ".join(out.split())
    _, out, _ = run(["fleet", "doctor", "--help"], capsys)
    assert all(name in out for name in fleet_checks())


def test_an_unknown_check_group_or_name_is_refused_before_any_host(tmp_path, capsys):
    path = _fleet(tmp_path)
    code, _, err = run(["fleet", "doctor", "-f", str(path), "--ignore", "fleet.front_dor"], capsys)
    assert code == 2 and "fleet.front_dor" in err and "did you mean 'fleet.front_door'" in err
    code, _, err = run(["fleet", "doctor", "-f", str(path), "--only", "fabrik"], capsys)
    assert code == 2 and "fabrik" in err


# --- the fleet checks, judged from what the door and its host answered -----------------------------


def _results(ctx: FleetContext) -> dict[str, list]:
    return {name: c.run(ctx) for name, c in fleet_checks().items()}


def test_a_member_the_door_cannot_reach_fails_under_that_member_with_fix_and_runbook(tmp_path):
    fleet = load_fleet(_fleet(tmp_path))
    ctx = FleetContext(fleet, door={"url": fleet.front_door_url, "answering": True, "members": None},
                       reach={"lab": "200", "lab-2": "000"})  # fmt: skip
    r = _results(ctx)
    assert [(x.host, x.status) for x in r["fleet.front_door"]] == [("fleet", "ok")]
    by_member = {x.host: x for x in r["fleet.members_reachable"]}
    assert by_member["lab"].status == "ok"
    bad = by_member["lab-2"]
    assert bad.status == "failed" and "http://10.231.0.21:8888/health" in bad.message and "no answer" in bad.message
    assert "inventory-2.yaml" in bad.fix and bad.runbook == "docs/runbooks/fleet.members_reachable.md"


def test_a_door_that_does_not_answer_fails_and_a_drained_member_warns(tmp_path):
    fleet = load_fleet(_fleet(tmp_path))
    ctx = FleetContext(fleet, door={"url": fleet.front_door_url, "answering": False, "error": "ConnectError: refused",
                                    "members": {"lab": "passing", "lab-2": "drained"}},
                       reach={"lab": "200", "lab-2": "200"})  # fmt: skip
    r = _results(ctx)
    door = r["fleet.front_door"][0]
    assert door.status == "failed" and "refused" in door.message and "sparkctl fleet up" in door.fix
    assert door.runbook == "docs/runbooks/fleet.front_door.md"
    states = {x.host: x.status for x in r["fleet.members_reachable"]}
    assert states == {"lab": "ok", "lab-2": "warn"}


def test_members_serving_different_model_names_fail_same_model_under_the_odd_one(tmp_path):
    other = second_pair(LAB)
    other["runtime"]["served_model_name"] = "something-else"
    fleet = load_fleet(_fleet(tmp_path, other))
    r = _results(FleetContext(fleet, door={"answering": True}, reach={}))["fleet.same_model"]
    assert {x.host: x.status for x in r} == {"lab": "ok", "lab-2": "failed"}
    bad = [x for x in r if x.status == "failed"][0]
    assert "'something-else'" in bad.message and LAB["runtime"]["served_model_name"] in bad.fix


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_door_hosts_probe_reports_each_members_health_code(tmp_path):
    """The shell the door's host runs, run here with bash and curl against a loopback server that
    answers /health (member lab) and a port nobody listens on (member lab-2)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    closed_port = harness.free_port()  # nothing listens there (nor will another test's server)
    first, second = copy.deepcopy(LAB), second_pair(LAB)
    for doc, addresses, port in ((first, ("127.0.0.1", "127.0.0.3", "127.0.0.5"), server.server_address[1]),
                                 (second, ("127.0.0.2", "127.0.0.4"), closed_port)):  # fmt: skip
        for host, address in zip(doc["hosts"].values(), addresses):
            host["ssh"]["address"] = address
        doc["runtime"]["port"] = port
    try:
        fleet = load_fleet(_fleet(tmp_path, second, first))
        out = subprocess.run(["bash", "-c", probe_command(fleet)], capture_output=True, text=True, timeout=30).stdout
    finally:
        server.shutdown()
    codes = dict(line.split(" ", 1) for line in out.splitlines())
    assert codes == {"lab": "200", "lab-2": "000"}


# --- history and the tables -------------------------------------------------------------------------


def test_history_merges_the_members_events_in_time_order_naming_each_member():
    lab = [{"at": "2026-12-01T20:00:00Z", "command": "up"}, {"at": "2026-12-01T22:00:05Z", "command": "reload"}]
    lab2 = [{"at": "2026-12-01T21:00:00Z", "command": "up"}, {"at": "2026-12-01T22:00:05Z", "command": "reload"}]
    merged = merge_events({"lab": lab, "lab-2": lab2}, last=0)
    assert [(e["member"], e["at"][11:19]) for e in merged] == [
        ("lab", "20:00:00"), ("lab-2", "21:00:00"), ("lab", "22:00:05"), ("lab-2", "22:00:05")]  # fmt: skip
    assert [e["member"] for e in merge_events({"lab": lab, "lab-2": lab2}, last=3)] == ["lab-2", "lab", "lab-2"]


def _console() -> Console:
    return Console(file=io.StringIO(), width=100, color_system=None, highlight=False)


def test_the_status_table_from_a_recorded_two_pair_fleet():
    doc = json.loads((RECORDED / "status-2pairs.json").read_text())
    c = _console()
    print_status(doc, c)
    text = c.file.getvalue()
    assert doc["front_door_url"] in text.splitlines()[0] and "answering" in text.splitlines()[0]
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    for m in doc["members"]:
        assert m["member"] in rows
        assert m["health"] in rows[m["member"]] and m["applied_config_hash"][:12] in rows[m["member"]]
        assert m["front_door"] == "passing" and "passing" in rows[m["member"]]
        assert f"{m['running']}/{m['waiting']}" in rows[m["member"]]


def test_the_status_table_says_which_member_runs_another_config_than_its_inventory():
    doc = json.loads((RECORDED / "status-2pairs.json").read_text())
    row = doc["members"][1]
    row.update(applied_config_hash="0123456789abcdef", inventory_applied=False, health="stale", healthy=False)
    doc["healthy"] = False
    c = _console()
    print_status(doc, c)
    text = c.file.getvalue()
    line = [ln for ln in text.splitlines() if ln.startswith("│") and f" {row['member']} " in ln][0]
    assert "0123456789ab" in line and f"inventory is {row['config_hash'][:12]}" in line and "stale" in line
    assert "not healthy" in text


def test_the_history_table_names_each_events_member():
    doc = {"fleet": "lab-fleet", "failed_members": [],
           "members": {"lab": {"last_good": "aaaa", "error": None}, "lab-2": {"last_good": None,
                       "error": {"error": "head2: connection refused", "fix": None, "exit_code": 1}}},
           "events": merge_events({"lab": [{"at": "2026-12-01T20:00:00Z", "command": "up", "outcome": "applied",
                                            "config_hash": "f092b40ef91371ad", "by": "root@vm"}]}, 0)}  # fmt: skip
    c = _console()
    print_history(doc, c)
    text = c.file.getvalue()
    row = [ln for ln in text.splitlines() if "2026-12-01T20:00:00Z" in ln][0]
    assert " lab " in row and "f092b40ef913" in row and "applied" in row
    assert "lab-2: head2: connection refused" in text and "lab: last good config aaaa" in text


def test_the_fleet_checks_are_in_the_one_registry_and_a_clusters_doctor_points_to_fleet_doctor():
    from sparkctl.checks import GROUPS, REGISTRY
    from sparkctl.checks.doctor import select
    from sparkctl.errors import InputError

    assert [n for n, c in REGISTRY.items() if c.fleet] == ["fleet.front_door", "fleet.members_reachable", "fleet.same_model"]
    assert "fleet" not in GROUPS and not any(c.fleet for c in select())
    with pytest.raises(InputError, match="between a fleet's members") as e:
        select(only=["fleet"])
    assert e.value.fix == "sparkctl fleet doctor -f FLEET --only fleet"


def test_fleet_doctor_runs_the_members_at_once(tmp_path, capsys):
    """Each member's hosts hold the connection and never send SSH's banner, so each member's doctor
    waits its connect timeout: run at once, the whole run lasts about one member's, in series it would
    last the longer member's and the other's after it (the figures are the run's own, on one clock)."""
    import socket

    from controlfiles import usable_here

    silent: list[socket.socket] = []  # listening, never accepting: the kernel completes the connection

    def silenced(doc: dict, folder: Path) -> dict:
        folder.mkdir()
        for host in doc["hosts"].values():  # an address each: a fleet's hosts are distinct
            silent.append(socket.create_server((f"127.0.0.{len(silent) + 2}", 0)))
            host["ssh"].update(address=silent[-1].getsockname()[0], port=silent[-1].getsockname()[1])
        doc["ssh_defaults"]["connect_timeout"] = 2
        return usable_here(doc, folder)

    first, second = silenced(copy.deepcopy(LAB), tmp_path / "a"), silenced(second_pair(LAB), tmp_path / "b")
    path = _fleet(tmp_path, second, first)
    try:
        code, out, err = run(["fleet", "doctor", "-f", str(path), "--only", "ssh", "--json"], capsys)
    finally:
        for s in silent:
            s.close()
    doc = json.loads(out)
    assert code == 1 and set(doc["member_seconds"]) == {"lab", "lab-2"}, (out, err)
    each = sorted(doc["member_seconds"].values())
    assert each[0] >= 2, doc["member_seconds"]  # each waited its hosts out
    # in series the run would last the longer member's and all of the other's; at once it adds not half of it
    assert doc["seconds"] < each[1] + each[0] / 2, (doc["seconds"], doc["member_seconds"])
