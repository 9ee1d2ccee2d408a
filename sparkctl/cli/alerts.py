"""`sparkctl alerts`: Prometheus alerting rules for the inventory's cluster, each linking its runbook."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory


def alerts(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    out: Annotated[
        Optional[Path], typer.Option("--out", "-o", help="Write the rule file here (default: print it on stdout).")
    ] = None,
    prometheus_config: Annotated[
        Optional[Path],
        typer.Option(
            "--prometheus-config",
            help="Also write a prometheus.yml scraping this cluster with the rules (needs --out: it names that file).",
        ),
    ] = None,
    dashboard: Annotated[
        Optional[Path],
        typer.Option(
            "--dashboard",
            help="Also write a Grafana dashboard (JSON to import) on the same series: serving, recoveries, holds, "
            "TTFT, tok/s, acceptance, KV use.",
        ),
    ] = None,
) -> None:
    """Write Prometheus alerting rules for the cluster.

    Engine down, worker lost, drafter unreachable, KV cache near full, preemptions, waiting queue,
    TTFT p99, an engine that stalls while /health answers, speculative acceptance, decode speed;
    the front door's (gateway down, a hold left behind, answers cut off, zero-token streams); the
    keeper gave up. Each rule has labels severity (page|ticket) and cluster, annotations summary,
    description, runbook (the `sparkctl runbook NAME` command) and, with alerts.runbook_base_url,
    runbook_url. Thresholds: the inventory's `alerts:` section (docs/alerts.md). Check the file
    with `promtool check rules FILE`.

    Examples:
      # the rules, checked by Prometheus's own tool
      sparkctl alerts --out rules.yml
      promtool check rules rules.yml
      # and a prometheus.yml that scrapes the cluster with them
      sparkctl alerts --out rules.yml --prometheus-config prometheus.yml
      # and the Grafana dashboard beside them
      sparkctl alerts --out rules.yml --dashboard sparkctl-dashboard.json
    """
    import os

    import yaml

    from sparkctl.alerts.render import rules_yaml, scrape_config
    from sparkctl.alerts.rules import missing_runbooks, rules_for
    from sparkctl.cli.output import answer, diagnostics, print_json
    from sparkctl.errors import InputError
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(require_inventory(inventory))
    if prometheus_config and not out:
        raise InputError(
            "--prometheus-config needs --out", fix="sparkctl alerts --out rules.yml --prometheus-config prometheus.yml"
        )
    rs = rules_for(inv)
    text = rules_yaml(rs)
    files = [(out, "--out", text)] if out else []
    if prometheus_config and out:  # --out is checked above
        # Prometheus reads a relative rule_files entry from the config file's own folder (config.go,
        # LoadFile -> SetDirectory): the pair works wherever it is copied, not only on this machine
        rules = os.path.relpath(out.resolve(), prometheus_config.resolve().parent)
        doc = scrape_config(rs, inv, [rules])
        files.append((prometheus_config, "--prometheus-config", yaml.safe_dump(doc, sort_keys=False)))
    if dashboard:
        import json

        from sparkctl.alerts.dashboard import dashboard as grafana_dashboard

        files.append((dashboard, "--dashboard", json.dumps(grafana_dashboard(rs, inv), indent=2) + "\n"))
    _write_files(files)
    if json_out:
        print_json({**rs.to_prometheus(), "not_written": rs.not_written, "written_to": str(out) if out else None})
        return
    if not out:
        typer.echo(text, nl=False)
    c = diagnostics()  # warnings: stdout holds the rules when there is no --out
    for alert, why in rs.not_written.items():
        c.print(f"[yellow]not written:[/] {alert}: {why}", soft_wrap=True)
    for name in missing_runbooks(rs):
        c.print(f"[red]missing runbook:[/] docs/runbooks/{name}.md", soft_wrap=True)
    if not rs.runbook_base_url:
        c.print(
            "[yellow]no runbook_url:[/] set alerts.runbook_base_url to where your team publishes docs/runbooks/; "
            "each rule's `runbook` annotation names the command that prints it (sparkctl runbook NAME)",
            soft_wrap=True,
        )
    if out:
        answer().print(
            f"{len(rs.rules)} rules written to {out}"
            + (f", scrape config to {prometheus_config}" if prometheus_config else "")
            + (f", dashboard to {dashboard}" if dashboard else ""),
            soft_wrap=True,
        )


def _write_files(files: list[tuple[Path, str, str]]) -> None:
    """Write (path, option, text) files whole, or none of them: every target is checked first."""
    import os

    from sparkctl.errors import InputError

    for path, option, _ in files:
        if path.is_dir():
            raise InputError(f"{option} {path} is a directory", fix=f"name a file, e.g. {option} {path / 'rules.yml'}")
        if not path.parent.is_dir():
            raise InputError(
                f"cannot write {option} {path}: folder {path.parent} does not exist",
                fix=f"create it (mkdir -p {path.parent}) or pass {option} a file in an existing folder",
            )
    for path, option, text in files:
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")  # renamed over the target: never a half-written file
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise InputError(f"cannot write {option} {path}: {err.strerror}", fix=f"pass {option} a writable path") from None
