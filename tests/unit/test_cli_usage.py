"""The command line's own handling (help, --version, a mistyped option) as an operator meets it, on
whichever typer release is installed: .ci/run also runs tests/unit at the lowest releases
pyproject.toml allows, where typer 0.12 made every command print "0.1.0" and exit 0, and typer
0.26.0-0.26.7 printed a usage error as a Python tuple."""

from __future__ import annotations

import subprocess
from pathlib import Path

import clirun

REPO = Path(__file__).resolve().parents[2]


def sparkctl(*args: str) -> subprocess.CompletedProcess:
    """The real console entry point (in this process: tests/clirun.py)."""
    return clirun.sparkctl(list(args), cwd=REPO, timeout=60)


def test_help_lists_the_commands():
    r = sparkctl("--help")
    assert r.returncode == 0, r.stderr
    for command in ("up", "down", "render", "status", "doctor", "reload", "inventory", "bench"):
        assert any(line.split()[:1] == [command] for line in r.stdout.splitlines() if line.startswith("  ")), (
            f"`sparkctl --help` does not list {command}:\n{r.stdout}"
        )
    assert r.stderr == ""


def test_version_prints_the_version_and_nothing_else():
    from sparkctl import __version__

    r = sparkctl("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{__version__}\n", "")


def test_a_mistyped_option_is_a_usage_error_that_names_the_right_one():
    r = sparkctl("up", "--chek")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    error = r.stderr.strip().splitlines()[-1]
    assert "--chek" in error and "--check" in error, r.stderr
    assert "('" not in error and "',)" not in error, f"a Python tuple, not a sentence: {error}"
    assert "Traceback" not in r.stderr


def test_no_help_page_speaks_of_the_project_s_sources():
    """Operators read --help: the hardware and the recipe, never the seeds, the tests or the reference
    notes a value came from (their provenance stays in the test fixtures)."""
    import re

    import typer

    from sparkctl.cli.app import build_app

    def pages(command, path: list[str]):
        # the command's own Context class: typer may vendor its own click
        with command.context_class(command, info_name=" ".join(path)) as ctx:
            yield " ".join(path), command.get_help(ctx)
            if hasattr(command, "list_commands"):  # a group
                for name in command.list_commands(ctx):
                    sub = command.get_command(ctx, name)
                    if sub is not None:
                        yield from pages(sub, [*path, name])

    found, seen = {}, 0
    for where, text in pages(typer.main.get_command(build_app()), ["sparkctl"]):
        seen += 1
        words = re.findall(r"(?i)\bseeds?\b|shared/|tests/(?:unit|lab)", text)
        if words:
            found[where] = sorted(set(words))
    assert seen > 20 and not found, (seen, found)


def _command(*path: str):
    """The typer app's click command at `path` (typer may vendor its own click)."""
    import typer

    from sparkctl.cli.app import build_app

    node = typer.main.get_command(build_app())
    for name in path:
        node = node.get_command(None, name)
    return node


def _option_help(command, flag: str) -> str:
    return next(p.help for p in command.params if flag in getattr(p, "opts", ()))


def _listed(text: str, after: str) -> list[str]:
    """The comma-separated names that follow `after` in a help text, up to the next period."""
    import re

    tail = " ".join(text.split()).split(after, 1)[1]
    return re.findall(r"[a-z_]+", tail.split(".")[0])


def test_doctor_help_names_every_check_group():
    """`--only keeper` or `--only weights` is found in the help, as the runbooks use them."""
    from sparkctl.checks import GROUPS

    doctor = _command("doctor")
    assert _listed(_option_help(doctor, "--only"), "repeated):") == list(GROUPS)
    assert _listed(doctor.help, "Groups:") == list(GROUPS)
    members = _listed(_option_help(_command("fleet", "doctor"), "--only"), "members'")
    assert members == [*GROUPS, "and", "fleet"]


def test_up_help_lists_the_steps_it_runs_in_their_order():
    from sparkctl.runner import load_playbook

    steps = [s.step for s in load_playbook("up").steps]
    assert _listed(_command("up").help, "Steps (playbooks/up.yaml):") == steps


def test_restart_help_promises_no_rollback():
    """A failed restart is not rolled back (its config is the last good one): its gates fail it."""
    import re

    for path in (("restart",), ("fleet", "restart")):
        command = _command(*path)
        for flag in ("--deadline", "--min-throughput-ratio"):
            text = _option_help(command, flag)
            promises = re.sub(r"[Nn]ot rolled back", "", text)
            assert not re.search(r"(?i)\broll(s|ed)? back\b", promises), (path, flag, text)
            assert "fail" in text.lower(), (path, flag, text)


def test_lab_fault_help_gives_the_defaults_the_lab_applies():
    import re

    from sparkctl_lab.faults import ALIASES, DEFAULTS

    fault = _command("lab", "fault")
    said = dict(re.findall(r"([a-z-]+): [^(;]*\(([^,)]+)", " ".join(_option_help(fault, "--value").split())))
    assert said == {kind: str(value) for kind, value in DEFAULTS.items()}
    kinds = next(p.help for p in fault.params if p.name == "kind")
    assert all(alias in kinds for alias, kind in ALIASES.items() if kind == "speed"), kinds
