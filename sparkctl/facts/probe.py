"""Gather many facts from a host in ONE SSH round trip.

Every probe is a shell snippet; `gather` joins them into one script with unique section markers,
runs it once, and splits the output back into one `Section` (exit code + stdout) per probe.
Each probe's stderr is folded into its stdout so a parser sees what an operator would.
Slow probes that only wait (pings, docker CLI calls) can be named in `background`: they start
first, run concurrently, and are collected at the end of the same script, so a host's round trip
costs about its slowest probe rather than the sum of all of them.
Parsing lives in the topic modules (network, gpu, rdma, system, docker, ...), tested on recorded output.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass
from typing import Collection, Mapping


@dataclass(frozen=True)
class Section:
    rc: int
    out: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


def build_script(probes: Mapping[str, str], marker: str, background: Collection[str] = ()) -> str:
    lines = ["exec 2>&1", "export LC_ALL=C"]
    bg = [k for k in probes if k in background]
    if bg:
        # each background probe writes its whole section (markers, output, exit code) to a file of
        # its own, and one `cat` prints them all at the end: per probe two forks and no exec (its
        # own output and its exit code in two files, each read by a `cat`, cost five processes)
        lines.append("__t=$(mktemp -d) || exit 97")
        for i, key in enumerate(bg):
            lines.append(
                f"{{ echo '{marker} {key}'; ( {probes[key]}\n) </dev/null; rc=$?; echo; echo \"{marker}rc $rc\"; }} "
                f'>"$__t/{i}" 2>&1 &'
            )
    for key, snippet in probes.items():
        if key in background:
            continue
        # a subshell per probe: one failing (or calling exit) never stops the others
        lines.append(f"echo '{marker} {key}'")
        lines.append(f"( {snippet}\n)")
        # always end the section with a newline of ours (removed when parsing), so output
        # without a trailing newline cannot swallow the end marker
        lines.append(f'rc=$?; echo; echo "{marker}rc $rc"')
    if bg:
        lines.append("wait")
        lines.append('cat "$__t"/*')
        lines.append('rm -rf "$__t"')
    return "\n".join(lines) + "\n"


def mark_recorded(record: str) -> str:
    """Shell filter: each `size ctime name` line of a listing, prefixed `u ` when `record` (a file of
    such lines, written when they were verified) holds it unchanged, else `c `. One awk for the whole
    listing, where a `grep` per file cost a process each (17,202 of them in one CI run)."""
    return (
        f"awk -v record={shlex.quote(record)} "
        "'BEGIN { while ((getline line < record) > 0) seen[line] = 1 } "
        '{ print (($0 in seen) ? "u " : "c ") $0 }\''
    )


def parse_output(text: str, marker: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    key = None
    buf: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(marker + " "):
            key, buf = line[len(marker) + 1 :].strip(), []
        elif line.startswith(marker + "rc ") and key is not None:
            sections[key] = Section(int(line.split()[1]), "".join(buf)[:-1])
            key = None
        elif key is not None:
            buf.append(line)
    return sections


def chunks(text: str, names: Collection[str]) -> dict[str, str]:
    """One probe's output split at its `@@name` lines (a probe that prints several parts: a
    listing, a record, a df line) -> {name: the lines after it}; every name is present."""
    out = dict.fromkeys(names, "")
    part = None
    for line in text.splitlines(keepends=True):
        if line.startswith("@@") and line[2:].strip() in out:
            part = line[2:].strip()
        elif part:
            out[part] += line
    return out


def gather(session, probes: Mapping[str, str], timeout: float = 60, background: Collection[str] = ()) -> dict[str, Section]:
    """Run all probes on the host behind `session` in one round trip."""
    marker = "@@sparkctl-" + secrets.token_hex(6)
    script = build_script(probes, marker, background)
    result = session.run(["sh", "-c", script], timeout=timeout)
    sections = parse_output(result.stdout, marker)
    missing = [k for k in probes if k not in sections]
    for k in missing:  # the script died before this probe: report it, don't guess
        sections[k] = Section(255, f"probe did not run (script exit {result.exit_code}): {result.stderr[-300:]}")
    return sections
