"""Every `sparkctl ...` command the README and docs/ show is one the command line has: its command
path and each option it passes, read from the typer app itself, so a renamed command or option
that a page (a runbook at 3 a.m., the first-deployment guide) still shows fails here, not for the
operator who copies it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# commands a page names on purpose although the CLI has no such command, and why
NOT_BUILT = {"sparkctl fleet export --kubernetes": "docs/fleets.md: what a future export would write, said not built"}
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def commands_in(text: str) -> list[str]:
    """The sparkctl command lines of a page: in its code blocks (a `$ ` prompt, `sudo` and VAR=value
    prefixes dropped, `\\` continuations joined) and in its inline code spans."""
    found: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"^\$\s+", "", line.strip())
            line = re.sub(r"^(sudo\s+(-E\s+)?)?([A-Z_][A-Z0-9_]*=\S*\s+)*", "", line)
            if line.startswith("sparkctl "):
                found.append(line)
    found += re.findall(r"`(sparkctl [^`\n]+)`", text)
    return found


def words(command: str) -> list[str]:
    """The command's words up to the first shell operator or comment, as the shell splits them."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    out: list[str] = []
    try:
        for word in lexer:
            if word in SHELL_OPERATORS or word.startswith("#"):
                break
            out.append(word)
    except ValueError:  # an unclosed quote: a span that shows part of a command
        pass
    return out


def problem(root, command: str) -> str | None:
    """What the CLI lacks of `command` (None: it has all of it). A word in capitals (ARGS, NAME)
    is a placeholder for the reader's own and ends the command path."""
    argv = words(command)[1:]
    node, path = root, ["sparkctl"]
    while hasattr(node, "list_commands") and argv and not argv[0].startswith("-"):
        if argv[0].isupper() or "..." in argv[0]:
            return None
        sub = node.get_command(None, argv[0])
        if sub is None:
            return f"`{' '.join(path)}` has no command {argv[0]!r}"
        path.append(argv.pop(0))
        node = sub
    known = {"--help"}
    for param in node.params:
        known |= {*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())}
    unknown = [w.split("=", 1)[0] for w in argv if w.startswith("-") and w != "-" and not re.fullmatch(r"-[\d.]+", w)]
    unknown = [w for w in unknown if w not in known]
    return f"`{' '.join(path)}` has no option {', '.join(unknown)}" if unknown else None


@pytest.fixture(scope="module")
def root():
    from sparkctl.cli.app import build_app

    return typer.main.get_command(build_app())


def test_every_command_a_page_shows_is_one_the_cli_has(root):
    problems, checked = [], 0
    for page in PAGES:
        for command in commands_in(page.read_text()):
            if command in NOT_BUILT:
                continue
            checked += 1
            if (why := problem(root, command)) is not None:
                problems.append(f"{page.relative_to(REPO)}: {command}\n    {why}")
    assert checked > 200, f"only {checked} commands found in the pages: is the extraction broken?"
    assert not problems, "commands the docs show that the CLI does not have:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "page, want",
    [
        ("```sh\n$ sparkctl up --chek -i c.yaml\n```\n", "`sparkctl up` has no option --chek"),
        ("Run `sparkctl reload --config new.yaml --dry-run`.", "`sparkctl reload` has no option --dry-run"),
        ("```\nSPARKCTL_LAB_INSTANCE=1 sparkctl fleet upp \\\n  -i f.yaml\n```", "`sparkctl fleet` has no command 'upp'"),
        ("```\nsparkctl doctor -i c.yaml --json | jq . # then --nope\n```", None),
        ("`sparkctl runbook NAME`, then `sparkctl gateway status --json`", None),
    ],
)
def test_a_renamed_command_or_option_on_a_page_is_named(root, page, want):
    found = [problem(root, c) for c in commands_in(page)]
    assert found and (want in found if want else not any(found)), found
