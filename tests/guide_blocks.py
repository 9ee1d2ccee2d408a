"""The command blocks of a user guide (docs/first-deployment.md) and where each may run.

Every fenced shell block of the guide is preceded by a marker line (an HTML comment, invisible in
the rendered page) saying how tests/lab/test_first_deployment_lab.py treats it on the lab:

    <!-- lab: run -->                  each command on the control machine, in order, in one shell
    <!-- lab: run on each Spark -->    each command on the head and on the worker (over SSH)
    <!-- lab: not run: WHY -->         only real hardware can (cabling, apt, installing the wheel)

A shell block without a marker, a marker this module does not know, or "not run" without a reason
is a problem: the guide gained a command nobody decided how to test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

SHELL_FENCES = {"", "sh", "bash", "shell", "console"}  # a ```yaml or ```json block shows a file, not commands
MARKER = re.compile(r"^<!--\s*lab:\s*(?P<what>.*?)\s*-->$")
FENCE = re.compile(r"^```(?P<info>\S*)\s*$")
CONTROL, EACH_SPARK = "control machine", "each Spark"


@dataclass(frozen=True)
class Block:
    line: int  # the opening fence's line number (1-based)
    where: Optional[str]  # CONTROL, EACH_SPARK, or None (not run)
    why_not: str  # the marker's reason, when not run
    commands: tuple[str, ...]  # one per command: continuation lines joined, comment-only lines dropped


def commands_of(lines: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        out.append((pending + line.strip()) if pending else line)
        pending = ""
    if pending:
        out.append(pending.rstrip())
    return tuple(out)


def _where(what: str) -> tuple[Optional[str], str, Optional[str]]:
    """(where, why not, problem) of a marker's text."""
    if what == "run":
        return CONTROL, "", None
    if what == "run on each Spark":
        return EACH_SPARK, "", None
    if what.startswith("not run:"):
        why = what.removeprefix("not run:").strip()
        return None, why, None if why else "`lab: not run:` without a reason"
    return None, "", f"unknown marker `lab: {what}` (run | run on each Spark | not run: WHY)"


def parse(text: str) -> tuple[list[Block], list[str]]:
    """The guide's shell blocks, and its problems (each naming its line)."""
    blocks: list[Block] = []
    problems: list[str] = []
    lines = text.splitlines()
    i = 0
    previous = ""  # the last non-blank line before the current one
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        start = i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        body = lines[start + 1 : end]
        i = end + 1
        if m["info"] not in SHELL_FENCES:
            previous = ""
            continue
        marker = MARKER.match(previous)
        previous = ""
        if marker is None:
            problems.append(f"line {start + 1}: a command block without a `<!-- lab: ... -->` marker")
            continue
        where, why, problem = _where(marker["what"])
        if problem:
            problems.append(f"line {start + 1}: {problem}")
            continue
        blocks.append(Block(start + 1, where, why, commands_of(body)))
    return blocks, problems
