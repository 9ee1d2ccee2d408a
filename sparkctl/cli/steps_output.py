"""How step runs look: a line per finished host and step as results arrive, then a recap table.

On a terminal, a live block under those lines shows one line per host, like docker compose's
per-service lines: the step it is in and that step's latest phase (spinning), or the last step it
finished. Finished lines are shortened at a word to the terminal's width, so nothing wraps; the
full text is in `--json` and in the plain lines written off a terminal (CI, pipes), which stay as
they always were. Built only on the runner's two callbacks: progress(host, step, text) while a step
applies, and result(StepResult) for each finished host and step.

A transfer (steps/transfer.py: the weights' download and copies, the longest thing `up` does) is
drawn as a bar with its bytes, rate and time left on a terminal; off one, each of its readings is
one line on stderr, so a log shows that minutes of silence are a copy moving, not a hang.

The finished lines and the recap are the run's answer (stdout: `up --check > plan.txt` keeps the
plan); the live block is progress (stderr). When both are the same terminal, finished lines go
through the live block's console so they land above it.
"""

from __future__ import annotations

import textwrap
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from sparkctl.steps.transfer import Phase, Transfer

if TYPE_CHECKING:  # rich.live is imported only when the report is live
    from rich.live import Live

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim"}
MARK = {"ok": "✓", "changed": "✓", "failed": "✗", "skipped": "-"}
INDENT = 17  # under the message: status (7) + host (9) + spaces
CLUSTER = "all"  # the host name the runner gives cluster-wide phases (the gate)


@dataclass
class HostLine:
    step: str = ""
    text: Phase = "waiting"
    status: Optional[str] = None  # None while the step runs; else how the last step ended
    since: float = 0.0


def shorten(text: str, width: int) -> str:
    """One line of at most `width` cells, cut at a word (a single over-long word is cut with '…')."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    short = textwrap.shorten(text, width=width, placeholder=" …")
    if short.strip() == "…" or len(short) > width:  # no word fits whole
        return text[: max(width - 1, 0)] + "…"
    return short


class LiveReport:
    """Prints each StepResult as it lands, and on a terminal keeps one live line per host."""

    def __init__(self, quiet: bool, hosts: Optional[list[str]] = None, console=None, verbose: bool = False, live_console=None):
        self.quiet = quiet
        self.verbose = verbose  # on a terminal: every word of each finished line, wrapped at words
        self._console = console  # finished lines (the answer); default: stdout
        self._live_console = live_console or console  # the live block (progress); default: stderr
        self._live: Optional[Live] = None
        self._lock = threading.Lock()
        self._hosts: dict[str, HostLine] = {h: HostLine() for h in hosts or []}
        self._cluster: Optional[tuple[str, str]] = None  # (step, phase) of a cluster-wide phase
        self._spinners: dict = {}

    @property
    def console(self):
        if self._console is None:
            from sparkctl.cli.output import answer

            self._console = answer()
        return self._console

    @property
    def live_console(self):
        if self._live_console is None:
            from sparkctl.cli.output import diagnostics

            self._live_console = diagnostics()
        return self._live_console

    @property
    def interactive(self) -> bool:
        """The live block runs: its console (stderr) is a terminal."""
        return not self.quiet and self.live_console.is_terminal and not self.live_console.is_dumb_terminal

    @property
    def on_terminal(self) -> bool:
        """Finished lines go to a terminal: fit them to its width."""
        return not self.quiet and self.console.is_terminal and not self.console.is_dumb_terminal

    def print(self, *objects, **kwargs) -> None:
        """Print part of the answer while the run goes on: above the live block when both share the terminal."""
        target = self._live.console if self._live is not None and self.on_terminal else self.console
        target.print(*objects, **kwargs)

    def note(self, text: str) -> None:
        """A diagnostic while the run goes on (stderr, above the live block)."""
        target = self._live.console if self._live is not None else self.live_console
        target.print(text, soft_wrap=True, highlight=False, markup=False)

    def __enter__(self) -> "LiveReport":
        if self.interactive:
            from rich.live import Live

            self._live = Live(self, console=self.live_console, refresh_per_second=8, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            with self._lock:
                self._cluster = None
            self._live.__exit__(*exc)

    # ---- the runner's callbacks ------------------------------------------------------------------

    def progress(self, host: str, step: str, text: Phase) -> None:
        now = time.monotonic()
        if isinstance(text, Transfer) and not self.interactive:
            # off a terminal (a log, CI, `--json` piped): a line per reading, on stderr beside the answer
            self.note(f"{host} {step}: {text}")
        with self._lock:
            if host == CLUSTER:
                self._cluster = (step, str(text))
                return
            if self._cluster and self._cluster[0] != step:
                self._cluster = None  # the cluster-wide phase is over: another step runs
            line = self._hosts.setdefault(host, HostLine())
            if line.step != step or line.status is not None:
                line.since = now
            line.step, line.text, line.status = step, text, None

    def result(self, r) -> None:
        with self._lock:
            if self._cluster and self._cluster[0] == r.step:
                self._cluster = None
            line = self._hosts.setdefault(r.host, HostLine())
            # a skip (a gate not needed, steps after a failure) never hides the last step that ran
            if r.status != "skipped" or line.status in (None, "skipped"):
                line.step, line.text, line.status = r.step, r.message, r.status
        if not self.quiet:
            self._print(r)

    # ---- finished lines ---------------------------------------------------------------------------

    def _print(self, r) -> None:
        """Off a terminal: every word, as plain lines (logs and CI keep the whole text). On a terminal:
        each line cut at a word to the width (verbose: wrapped at words, whole); a fix is always
        wrapped at words, never cut."""
        from rich.text import Text

        from sparkctl.transport.redact import redact

        term = self.on_terminal
        head = f"{r.status:>7} {r.host:<9} {r.step:<8} "

        def fit(text: str, indent: int, wrap: bool = self.verbose) -> list[str]:
            text = redact(text)
            room = max(self.console.width - indent, 20)
            if not term:
                return [text]
            if wrap:
                return textwrap.wrap(text, width=room, break_long_words=False) or [""]
            return [shorten(text, room)]

        message = fit(r.message, len(head))
        lines = [Text.assemble((head[:7], STYLE.get(r.status, "")), head[7:] + message[0])]
        lines += [Text(" " * len(head) + more) for more in message[1:]]
        # one change is already the message; list them when there are several
        for ch in r.changes if r.status != "ok" and len(r.changes) > 1 else []:
            for i, part in enumerate(fit(ch, INDENT + 2)):
                lines.append(Text(" " * INDENT + ("- " if i == 0 else "  ") + part, style="dim"))
        for i, part in enumerate(fit(r.fix, INDENT + 5, wrap=True) if r.fix else []):
            lines.append(Text.assemble(" " * INDENT, ("fix:" if i == 0 else "    ", "bold"), " " + part))
        for t in lines:
            if term:
                self.print(t, no_wrap=True, overflow="ellipsis")
            else:
                self.print(t, soft_wrap=True)

    # ---- the live block ---------------------------------------------------------------------------

    def __rich__(self):
        from rich.console import Group
        from rich.text import Text

        now = time.monotonic()
        with self._lock:
            hosts = [(h, HostLine(**vars(line))) for h, line in self._hosts.items()]
            cluster = self._cluster
        rows = []  # (mark, name, step, phase: its text, or (seconds in the step, a transfer))
        if not cluster and not any(line.step for _, line in hosts):
            rows.append((self._frame("", now), "", "", "gathering facts from every host"))
        if cluster:
            rows.append((self._frame(CLUSTER, now), CLUSTER, cluster[0], cluster[1]))
        for host, line in hosts:
            if line.status is None and line.step and isinstance(line.text, Transfer):
                rows.append((self._frame(host, now), host, line.step, (now - line.since, line.text)))
            elif line.status is None and line.step:
                # how long this host has been in the step, then the step's latest phase
                rows.append((self._frame(host, now), host, line.step, f"{now - line.since:3.0f}s {line.text}"))
            else:
                mark = Text(MARK.get(line.status or "", "·"), style=STYLE.get(line.status or "", "dim"))
                rows.append((mark, host, line.step or "-", f"{line.status or ''} {line.text}"))
        name_w = max((len(r[1]) for r in rows), default=0)
        step_w = max((len(r[2]) for r in rows), default=0)
        width = self.live_console.width
        lines = []
        for mark, name, step, phase in rows:
            t = Text.assemble(mark, " ", (f"{name:<{name_w}}", "bold"), " ", f"{step:<{step_w}}", " ")
            if isinstance(phase, tuple):  # (seconds in the step, a transfer): its bar
                lines.append(_transfer_line(t, phase[0], phase[1], width))
                continue
            t.append(shorten(phase, max(width - t.cell_len, 8)))
            t.no_wrap, t.overflow = True, "ellipsis"
            lines.append(t)
        return Group(*lines)

    def _frame(self, key: str, now: float):
        """The spinner of one line at this moment (one spinner per line, so each keeps turning)."""
        from rich.spinner import Spinner

        if key not in self._spinners:
            self._spinners[key] = Spinner("dots", style="cyan")
        return self._spinners[key].render(now)


def _transfer_line(head, seconds: float, transfer: Transfer, width: int):
    """One host's line for a transfer, `width` cells at most: the head (mark, host, step), the time in
    the step and what moves (cut at a word), a bar, then the figures (bytes, rate, time left)."""
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    # a narrow terminal: the rate gives way first, then the bar's length, so what moves keeps a few words
    wide = max(6, min(30, width // 8))
    for figures, bar in ((transfer.short(), wide), (transfer.short(with_rate=False), wide), (transfer.short(False), 6)):
        room = width - head.cell_len - bar - len(figures) - 2  # a space each side of the bar
        if room >= 16:
            break
    doing = head.copy()
    doing.append(shorten(f"{seconds:3.0f}s {transfer.doing}", max(room, 4)))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, overflow="ellipsis", width=doing.cell_len)
    grid.add_column(width=bar)
    grid.add_column(no_wrap=True, overflow="ellipsis", width=len(figures))  # its own width: no version of rich cuts it
    grid.add_row(
        doing, ProgressBar(total=max(transfer.total, 1), completed=min(transfer.done, transfer.total), width=bar), Text(figures)
    )
    return grid


def print_recap(recap, c=None) -> None:
    """A row per step, a column per host: a playbook has nine steps and a cluster two or three hosts,
    so this fits 80 columns where a column per step did not (its headers were cut to "pref…").
    Names are folded, never cut."""
    from rich.table import Table
    from rich.text import Text

    from sparkctl.cli.output import answer

    hosts = list(dict.fromkeys(r.host for r in recap.results))
    seen = {r.step for r in recap.results}
    steps = [s for s in recap.steps if s in seen] or sorted(seen)
    table = Table(title=f"{recap.playbook}{' --check' if recap.check_mode else ''}: recap", title_justify="left")
    table.add_column("step", overflow="fold")
    for h in hosts:
        table.add_column(Text(h), overflow="fold")
    cell = {(r.host, r.step): r.status for r in recap.results}
    for s in steps:
        table.add_row(s, *[Text(cell.get((h, s), "-"), style=STYLE.get(cell.get((h, s), ""), "dim")) for h in hosts])
    c = c or answer()
    c.print(table)
    totals = ", ".join(f"{k}={recap.count(k)}" for k in ("ok", "changed", "failed", "skipped"))
    if recap.failed:
        verdict = "[bold red]FAILED[/]"
    elif not recap.count("changed"):
        verdict = "[green]nothing to change[/]"
    else:
        verdict = "[yellow]changes planned (nothing applied: --check)[/]" if recap.check_mode else "[yellow]converged[/]"
    c.print(f"{verdict}  {totals}  in {recap.seconds:.2f} s")
    if recap.stopped_at:
        c.print(f"stopped at step [bold]{recap.stopped_at}[/]: later steps were not run, nothing after it changed")
