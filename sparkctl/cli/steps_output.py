"""How step runs look: one live line per host and step as results arrive, then a recap table."""

from __future__ import annotations

import threading

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim"}


class LiveReport:
    """Prints each StepResult as it lands and shows what is in progress (a spinner line)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self._status = None
        self._lock = threading.Lock()
        self._current: dict[tuple[str, str], str] = {}

    def __enter__(self) -> "LiveReport":
        if not self.quiet:
            from sparkctl.cli.output import console

            self._status = console().status("gathering facts from every host ...")
            self._status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def progress(self, host: str, step: str, text: str) -> None:
        with self._lock:
            self._current[(host, step)] = text
            if self._status is not None:
                self._status.update(" | ".join(f"{h} {s}: {t}" for (h, s), t in self._current.items())[:200])

    def result(self, r) -> None:
        with self._lock:
            self._current.pop((r.host, r.step), None)
        if self.quiet:
            return
        from rich.markup import escape

        from sparkctl.cli.output import console
        from sparkctl.transport.redact import redact

        style = STYLE.get(r.status, "")
        line = f"[{style}]{r.status:>7}[/] {r.host:<9} {r.step:<8} {escape(redact(r.message))}"
        console().print(line, soft_wrap=True)
        # one change is already the message; list them when there are several
        for c in r.changes if r.status != "ok" and len(r.changes) > 1 else []:
            console().print(f"{'':17}[dim]- {escape(redact(c))}[/]", soft_wrap=True)
        if r.fix:
            console().print(f"{'':17}[bold]fix:[/] {escape(redact(r.fix))}", soft_wrap=True)


def print_recap(recap) -> None:
    from rich.table import Table

    from sparkctl.cli.output import console

    hosts = sorted({r.host for r in recap.results}, key=[r.host for r in recap.results].index)
    seen = {r.step for r in recap.results}
    steps = [s for s in recap.steps if s in seen] or sorted(seen)
    table = Table(title=f"{recap.playbook}{' --check' if recap.check_mode else ''}: recap", title_justify="left")
    table.add_column("host")
    for s in steps:
        table.add_column(s)
    cell = {(r.host, r.step): r.status for r in recap.results}
    for h in hosts:
        table.add_row(h, *[f"[{STYLE.get(cell.get((h, s), ''), 'dim')}]{cell.get((h, s), '-')}[/]" for s in steps])
    c = console()
    c.print(table)
    totals = ", ".join(f"{k}={recap.count(k)}" for k in ("ok", "changed", "failed", "skipped"))
    verdict = "[bold red]FAILED[/]" if recap.failed else ("[green]nothing to change[/]" if recap.count("changed") == 0 else "[yellow]converged[/]")
    if recap.check_mode and not recap.failed:
        verdict = "[yellow]changes planned (nothing applied: --check)[/]" if recap.count("changed") else "[green]nothing to change[/]"
    c.print(f"{verdict}  {totals}  in {recap.seconds:.2f} s")
    if recap.stopped_at:
        c.print(f"stopped at step [bold]{recap.stopped_at}[/]: later steps were not run, nothing after it changed")
