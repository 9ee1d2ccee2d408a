"""What only a process shows: the installed console script, `python -m sparkctl`, the exit status a
shell sees, and what reaches file descriptors 1 and 2. Every other CLI test runs sparkctl in its own
process (tests/clirun.py); these are the few that start one. (Signals: test_interrupt.py, Ctrl-C and
SIGTERM; a file as stdout: test_output_streams.py; a terminal: test_narrow_terminal.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import __version__

REPO = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "sparkctl"  # what `pip install` puts on the operator's PATH
ENV = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_INVENTORY", "COLUMNS")}


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=REPO, env=ENV, timeout=60)


@pytest.mark.parametrize("command", [[str(CONSOLE_SCRIPT)], [sys.executable, "-m", "sparkctl"]], ids=["script", "module"])
def test_the_installed_command_and_the_module_answer_and_exit_0(command):
    r = run(*command, "--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{__version__}\n", "")


def test_bad_input_exits_2_its_error_on_stderr_and_nothing_on_stdout(tmp_path):
    r = run(str(CONSOLE_SCRIPT), "inventory", "validate", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stdout == "", r
    assert "error:" in r.stderr and "missing.yaml" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr


def test_bad_input_with_json_is_one_document_on_stdout_and_nothing_on_stderr(tmp_path):
    r = run(str(CONSOLE_SCRIPT), "inventory", "validate", str(tmp_path / "missing.yaml"), "--json")
    assert (r.returncode, r.stderr) == (2, ""), r
    doc = json.loads(r.stdout)  # exactly one document
    assert doc["exit_code"] == 2 and "missing.yaml" in doc["error"]


def test_a_usage_error_exits_2_as_click_says_it(tmp_path):
    r = run(str(CONSOLE_SCRIPT), "status", "--no-such-option")
    assert r.returncode == 2 and r.stdout == "" and "No such option" in r.stderr, r


def test_a_failed_check_exits_1_its_answer_still_on_stdout():
    import socket

    with socket.socket() as closed:  # bound and not listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        r = run(str(CONSOLE_SCRIPT), "status", "--endpoint", f"http://127.0.0.1:{closed.getsockname()[1]}")
    assert r.returncode == 1, r
    assert r.stdout.startswith("runtime http://127.0.0.1:") and "Traceback" not in r.stderr


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["human", "json"])
def test_the_in_process_run_the_other_tests_use_answers_as_the_process_does(tmp_path, json_flag):
    """tests/clirun.py stands in for this process everywhere else: same exit code, stdout and stderr,
    and nothing of the run (its environment, working directory, streams) left in the test's process."""
    import clirun

    args = ["inventory", "validate", str(tmp_path / "missing.yaml"), *json_flag]
    process = run(str(CONSOLE_SCRIPT), *args)
    env_before, cwd_before, streams = dict(os.environ), os.getcwd(), (sys.stdout, sys.stderr)
    here = clirun.sparkctl(args, env={**ENV, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"}, cwd=tmp_path)
    assert (here.returncode, here.stdout, here.stderr) == (process.returncode, process.stdout, process.stderr)
    assert (dict(os.environ), os.getcwd(), (sys.stdout, sys.stderr)) == (env_before, cwd_before, streams)
