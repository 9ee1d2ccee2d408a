"""Small things an operator meets on day one: shell completion, `up`'s recap off a terminal,
help summaries, and what `sparkctl --help` loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import clirun

from sparkctl.cli.steps_output import print_recap
from sparkctl.runner import Recap, load_playbook
from sparkctl.steps.base import StepResult

REPO = Path(__file__).resolve().parents[2]


def sparkctl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_INVENTORY", "COLUMNS")}
    return clirun.sparkctl(list(args), cwd=REPO, env={**base, **(env or {})}, timeout=60)


def test_recap_off_a_terminal_fits_80_columns_with_every_name_whole(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: rich's 80 columns
    steps = [s.step for s in load_playbook("up").steps]  # the nine steps of `sparkctl up`
    hosts = ["spark-head-01", "spark-worker-01", "offload-x86-01"]
    recap = Recap("up", check_mode=True, steps=steps, seconds=1.2,
                  results=[StepResult(s, h, "ok", "fine") for s in steps for h in hosts])  # fmt: skip
    print_recap(recap)
    out, err = capsys.readouterr()
    text = out + err
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "…" not in text, text  # nothing cut: no "pref…", no "work…"
    for name in steps + hosts:
        assert re.search(rf"(^|[\s│┃]){re.escape(name)}([\s│┃]|$)", text, re.M), (name, text)


def test_command_summaries_are_not_cut_at_an_abbreviation():
    for group in ([], ["inventory"], ["bench"]):
        r = sparkctl(*group, "--help", env={"COLUMNS": "200"})
        assert r.returncode == 0, r.stderr
        # the command lists: "Commands:" in a group, one panel per kind at the top ("Cluster:", ...)
        parts = re.split(r"^(\S.*):$", r.stdout, flags=re.M)
        lists = [body for title, body in zip(parts[1::2], parts[2::2]) if title not in ("Options", "Examples")]
        assert lists, r.stdout
        for line in filter(str.strip, "".join(lists).splitlines()):
            name, summary = line.split(None, 1)
            assert not summary.rstrip().endswith(("e.g.", "i.e.", "e.g", "i.e")), (name, summary)
    top = sparkctl("--help", env={"COLUMNS": "200"}).stdout
    assert re.search(r"^  rollback\s+Restore the last good config", top, re.M)


def test_shell_completion_is_offered_and_completes():
    help_text = sparkctl("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text
    # typer detects the shell from the process tree (shellingham), which a test runner's tree may not
    # show; typer's own switch makes --show-completion take the shell named instead
    script = sparkctl("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.returncode == 0 and "_SPARKCTL_COMPLETE" in script.stdout and "complete " in script.stdout
    # what the installed bash script asks the program, and its answer
    words = sparkctl(env={"_SPARKCTL_COMPLETE": "complete_bash", "COMP_WORDS": "sparkctl inv", "COMP_CWORD": "1"})
    assert words.returncode == 0 and words.stdout.split() == ["inventory"]
    words = sparkctl(env={"_SPARKCTL_COMPLETE": "complete_bash", "COMP_WORDS": "sparkctl status --end", "COMP_CWORD": "2"})
    assert words.stdout.split() == ["--endpoint"]


def test_help_loads_no_pydantic():
    # pydantic is what a run that validates something needs; the list of commands has no use for it.
    # (A command's own --help builds its parameters, and typer 0.29 does that with pydantic.)
    code = ("import sys\nfrom sparkctl.cli.app import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('pydantic loaded' if 'pydantic' in sys.modules else 'no pydantic')")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.stderr.endswith("no pydantic"), r.stderr[-2000:]
