"""Fixtures shared by every test: the lab cluster (root only) and fault cleanup.

Tests marked `lab` need root and the lab. Without root they are skipped with the reason, except
when the environment variable CI is set: CI runs everything, so there they fail instead.

    lab         (session) brings the lab up once with one Spark pair (idempotent; a second pair
                a killed fleet test left goes), clears leftover faults, and returns
                `sparkctl_lab.api` (host_exec, status, fault, LAB_DIR, ...)
    lab_faults  (function) the same api; clears every fault when the test ends
    request.node.reports["call"]  a test's report, for its fixtures' teardown (did it pass?)

RUN_LAST lists the test files ordered after every other test of the session, in that order (the
rest see one undisturbed, one-pair lab): the files that share the lab's second pair (from
tests/lab/test_lab_clusters.py, which brings it up, to test_lab_pair_removal.py, which takes it
away: tests/lab/conftest.py), then tests/lab/test_lab_updown.py, which takes the whole lab down and up.

There is one lab per machine: a session that runs lab tests holds an exclusive lock on
LAB_SESSION_LOCK from its first lab test to its end, so two pytest runs on one machine (two
developers, or a developer beside a benchmark) take turns instead of breaking each other's lab.
"""

from __future__ import annotations

import os
import signal

import pytest

# A test run started in the background by a non-interactive shell (.ci/run starts .ci/floors with
# `&`) inherits SIGINT ignored, and so would every sparkctl the tests start (an ignored signal stays
# ignored across exec): the Ctrl-C tests need it delivered. A handled one is reset at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

RUN_LAST = [  # file names, in the order they run last
    "test_lab_clusters.py",  # brings the lab's second pair up (tests/lab/conftest.py second_pair) ...
    "test_fleet_door_lab.py",  # ... the fleet's files share it and the fleet on it ...
    "test_fleet_cli_lab.py",
    "test_fleet_rollout.py",
    "test_lab_pair_removal.py",  # ... and this one takes it away
    "test_lab_updown.py",
]
from sparkctl_lab.paths import PREFIX  # noqa: E402  (stdlib only: which lab, SPARKCTL_LAB_INSTANCE)

LAB_SESSION_LOCK = f"/run/lock/sparkctl-{PREFIX}-tests.lock"  # one per lab: a second lab has its own
_lab_lock = None  # the open lock file while this session holds the lab
_lab_up = False  # the lab fixture has brought the lab up in this session


def _hold_lab() -> None:
    """Block until no other test session uses the lab; held until this process exits."""
    global _lab_lock
    if _lab_lock is not None:
        return
    import fcntl

    os.makedirs(os.path.dirname(LAB_SESSION_LOCK), exist_ok=True)
    f = open(LAB_SESSION_LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"\n[waiting for the lab: another test session holds {LAB_SESSION_LOCK}]", flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    _lab_lock = f


def _why_no_lab() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the lab creates network namespaces, mounts, sshd and dockerd"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"lab test cannot run ({reason}); in CI nothing is skipped", pytrace=False)
    pytest.skip(reason)


LAB_TESTS = "tests/lab/"  # every lab test lives here: pytest-xdist sends this folder to one worker

# `./dev.sh test` runs the lab tests on three labs at once (SPARKCTL_LAB_SPLIT=1): the files listed
# here on the lab they name (SPARKCTL_LAB_INSTANCE), every other lab file on the first. Chosen by
# their CI times (junit, benchmarks/suite-time.md "Three labs again") from files that touch only their own lab
# through its inventory, topology and api, so the three end close together: the first keeps the
# drills (~620 s of ~2240 in CI run H, three labs) and the lab's own tests of its literal addresses,
# the third the RUN_LAST files (which must share one lab: the second pair, then the lab taken down and up).
# (ci43, issue 41: 735 / 733 / 759 s of tests; test_status_watch, ~10 s, moved from the third to the first.
# ci50: 863 / 809 / 809 s; test_first_deployment_lab, 13 s, to the second, test_gateway_drain_lab, 10 s, to the third.
# ci84: 729 / 735 / 744 s, then the engine-stalled drill, ~50 s, on the first: test_deadlines, 36 s, to the third.)
OTHER_LAB_FILES = {
    1: [
        "test_reload.py", "test_repairs.py", "test_reload_plan_lab.py", "test_runtime_sim.py", "test_doctor.py",
        "test_lock_lab.py", "test_mp_executor.py", "test_weights.py", "test_gateway_keys_lab.py", "test_secrets.py",
        "test_first_deployment_lab.py",
    ],
    2: [
        "test_up.py", "test_gateway_changes.py", "test_alerts_lab.py", "test_doctor_runtime.py",
        "test_wheel_install.py", "test_images_provenance.py", "test_progress_tty.py",
        "test_bench_lab.py", "test_gateway_lab.py", "test_keeper_lab.py", "test_gateway_drain_lab.py",
        "test_images_from_node.py", "test_deadlines.py", *RUN_LAST,
    ],
}  # fmt: skip
LAB_OF = {f: i for i, files in OTHER_LAB_FILES.items() for f in files}


def _this_labs_share(config, items) -> None:
    """Under SPARKCTL_LAB_SPLIT: keep only the lab files of this process's lab (deselect the rest)."""
    if os.environ.get("SPARKCTL_LAB_SPLIT") != "1":
        return
    from sparkctl_lab.paths import INSTANCE

    keep, gone = [], []
    for i in items:
        (gone if i.nodeid.startswith(LAB_TESTS) and LAB_OF.get(i.path.name, 0) != INSTANCE else keep).append(i)
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    lab_dir = os.path.join(os.path.dirname(__file__), "lab")
    listed = [f for files in OTHER_LAB_FILES.values() for f in files]
    lost = [f for f in listed if not os.path.exists(os.path.join(lab_dir, f))]
    if lost:  # a renamed file would quietly move to the first lab and unbalance the three
        raise pytest.UsageError(f"OTHER_LAB_FILES names files not in tests/lab: {', '.join(lost)}")
    twice = sorted({f for f in listed if listed.count(f) > 1})
    if twice:
        raise pytest.UsageError(f"OTHER_LAB_FILES names files twice: {', '.join(twice)}")
    if len({LAB_OF.get(f, 0) for f in RUN_LAST}) != 1:  # they share one lab's second pair, then take it down
        raise pytest.UsageError("OTHER_LAB_FILES splits the RUN_LAST files over labs: they must share one")
    _this_labs_share(config, items)
    # stable: everything else keeps its order, before the RUN_LAST files in theirs
    items.sort(key=lambda item: RUN_LAST.index(item.path.name) + 1 if item.path.name in RUN_LAST else 0)
    strays = [i.nodeid for i in items if i.get_closest_marker("lab") is not None and not i.nodeid.startswith(LAB_TESTS)]
    if strays:  # it would run beside the lab's owner, on the other worker
        raise pytest.UsageError(f"lab tests outside {LAB_TESTS}: {', '.join(strays)}; move them there")


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (`pytest -n 2`; `./dev.sh test` runs tests/unit and tests/lab as two plain
    pytest processes instead): every test of tests/lab/ on one worker,
    in collection order (the lab has one owner; the RUN_LAST files last), the unit tests spread over
    both. (xdist's own loadgroup cannot do it on pytest 9: it renames node ids through a field
    pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return LAB_TESTS if nodeid.startswith(LAB_TESTS) else nodeid

    return LabOnOneWorker(config, log)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """item.reports["setup" | "call"]: the test's reports, for a fixture's teardown to read."""
    report = yield
    item.__dict__.setdefault("reports", {})[report.when] = report
    return report


def pytest_runtest_setup(item):
    if item.get_closest_marker("lab") is not None:
        reason = _why_no_lab()
        if reason:
            _skip_or_fail(reason)
        _hold_lab()


@pytest.fixture(scope="session")
def lab():
    reason = _why_no_lab()
    if reason:
        _skip_or_fail(reason)
    _hold_lab()
    from sparkctl_lab import api

    global _lab_up
    api.up(clusters=1)  # the suite's lab has one pair (a fleet test adds the second and takes it away)
    _lab_up = True
    api.clear_faults()
    # this session holds the lab alone (LAB_SESSION_LOCK): a cluster lock or reload journal left on
    # the head can only be from a run that was killed (a timed-out test); it must not fail the rest
    api.host_exec("head", ["rm", "-f", "/var/lib/sparkctl/state/lock", "/var/lib/sparkctl/state/journal.json"])
    # nor may a keeper a killed run left on the head (tests/lab/test_keeper_lab.py) repair what tests break
    api.host_exec("head", ["sh", "-c", "systemctl disable --now sparkctl-keeper.service 2>/dev/null; "
                                       "rm -rf /etc/systemd/system/sparkctl-keeper.service /etc/sparkctl/keeper"])  # fmt: skip
    return api


def _clear_gone_lock(api) -> None:
    """A cluster lock whose holder (a sparkctl run this session started) is gone: a test killed it.
    Left in place it would fail every later test with "locked by a gone run"; a live holder stays."""
    import json
    import socket

    r = api.host_exec("head", ["cat", "/var/lib/sparkctl/state/lock"])
    if r.returncode != 0 or not r.stdout.strip():
        return
    try:
        holder = json.loads(r.stdout)
        if holder.get("host") != socket.gethostname():  # a run on a lab host (the keeper): not this machine's pid
            return
        pid = int(holder["pid"])
        os.kill(pid, 0)
    except (ValueError, KeyError, TypeError, ProcessLookupError):
        api.host_exec("head", ["rm", "-f", "/var/lib/sparkctl/state/lock"])
    except PermissionError:
        pass


@pytest.fixture(autouse=True)
def _lab_lock_hygiene(request):
    """After each lab test: no lock of a killed run survives into the next test."""
    yield
    # (a lab-marked test that needs no lab, run before the lab fixture, has no lab to look at yet)
    if request.node.get_closest_marker("lab") is not None and _lab_up and os.geteuid() == 0:
        from sparkctl_lab import api

        _clear_gone_lock(api)


@pytest.fixture
def lab_faults(lab):
    yield lab
    lab.clear_faults()
