"""`sparkctl status`: what runs where, its config hash against the inventory's, health, live figures."""

from __future__ import annotations

import os
import select
import sys
import time
from contextlib import contextmanager
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, check_seconds, require_inventory
from sparkctl.cluster_status import (
    collect,
    head_base,
    host_containers,
    runtime_doc,
    runtime_session,
    sample,
)


def keeper_line(k: dict) -> str:
    from rich.markup import escape

    if k["state"] == "gave up":
        return f"keeper: [bold red]gave up[/] at {k.get('since')}: {escape(str(k.get('reason')))}"
    if k["state"] == "not running":
        return f"keeper: [red]not running[/] ({k['unit']}): nothing brings the cluster back by itself"
    if k["state"] == "off":
        return "keeper: off (keeper.enabled: false)"
    n = k.get("recoveries_in_window") or 0
    return "keeper: [green]watching[/]" + (f", {n} recovery(ies) in its window" if n else "")


def gateway_line(g: dict) -> str:
    from rich.markup import escape

    if g["state"] == "not answering":
        return f"gateway {g['url']}: [red]not answering[/] ({escape(g.get('error') or '')})"
    if g["state"] == "holding":
        h = g.get("hold")
        why = (
            f"holding for {escape(str(h['reason']))} ({h['held_for_s']:.0f} s, ends by itself in {h['expires_in_s']:.0f} s)"
            if h
            else f"holding: the engine refuses connections ({g.get('upstream_down_for_s') or 0:.0f} s)"
        )
        state = f"[yellow]{why}[/]"
    else:
        state = "[green]passing[/]"
    parts = [
        f"gateway {g['url']}: {state}",
        f"{g['held_requests']} held, {g['in_flight']} in flight",
        f"upstream {g.get('upstream')}",
    ]
    if g.get("empty_streams"):
        parts.append("zero-token streams " + ", ".join(f"{n} {k}" for k, n in g["empty_streams"].items()))
    return ", ".join(parts)


def status(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    sample: Annotated[float, typer.Option("--sample", help="Seconds between the two /metrics scrapes for tok/s.")] = 1.0,
    endpoint: Annotated[
        Optional[str],
        typer.Option(
            "--endpoint",
            help="Read any vLLM endpoint (http://HOST:PORT): /health, /v1/models and /metrics, with no inventory and no SSH.",
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="A live view refreshed every --interval seconds; q or Ctrl-C exits.")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes of --watch.")] = 2.0,
) -> None:
    """Show what runs where, its health, tok/s, acceptance and KV use.

    Each container's config hash is checked against the inventory's. Exit 0 when every runtime
    container runs the inventory's config and /health is 200, else 1. Figures are over the --sample
    seconds (with --watch, the last interval); speculative acceptance too when drafts were made in
    it, else since the runtime started (it says which). --endpoint URL: only the runtime part, for
    any vLLM endpoint (exit 0 when /health is 200). Off a terminal, --watch prints a line per
    interval.

    Examples:
      # every host's containers, health and figures, once
      sparkctl status -i my-cluster.yaml
      # a live view, refreshed every 2 s (q quits)
      sparkctl status --watch
      # any vLLM endpoint, without an inventory
      sparkctl status --endpoint http://10.0.0.5:8000
    """
    from sparkctl.cli.output import answer, print_json
    from sparkctl.errors import InputError
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.launch.plan import render

    if watch and json_out:
        raise InputError(
            "--watch is a live view for a person; --json prints one document",
            fix="drop one of them (a script polls `sparkctl status --json`)",
        )
    if not interval > 0:  # nan too
        raise InputError(f"--interval {interval:g}: must be more than 0 seconds", fix="e.g. --interval 2")
    check_seconds("--sample", sample, low=0.2, high=60, example="1")
    if endpoint:
        base = endpoint_base(endpoint)
        if watch:
            return watch_view(lambda: None, base, interval)
        doc = endpoint_status(base, max(0.2, sample))
    else:
        inv = load_inventory(require_inventory(inventory), control_machine=True)
        plan = render(inv)
        if watch:
            base = head_base(inv)
            # one SSH session per host for the whole watch: a frame is one round trip, not a reconnect
            with runtime_session(inv, plan) as cluster:
                return watch_view(lambda: host_containers(inv, plan, cluster), base, interval)
        doc = collect(inv, plan, max(0.2, sample))
    if json_out:
        print_json(doc)
    elif endpoint:
        answer().print(runtime_line(doc["runtime"]), soft_wrap=True)
    else:
        print_hosts(doc)
    raise typer.Exit(0 if doc["healthy"] else 1)


def print_hosts(doc: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    from sparkctl.cli.output import answer
    from sparkctl.cli.tables import fit_table

    t = Table(title=f"cluster {doc['cluster']}: inventory config {doc['config_hash']}", title_justify="left")
    for col in ("host", "container", "state", "config", "image"):
        t.add_column(col)
    errors = {h: info["error"] for h, info in doc["hosts"].items() if info["error"]}
    for h, info in doc["hosts"].items():
        if info["error"]:
            # one line (cut at a word when the terminal is narrow), not a tall wrapped cell; the host
            # column already names the host
            t.add_row(Text(h), Text("-"), Text(info["error"].removeprefix(f"{h}: "), style="red", no_wrap=True))
        for c in info["containers"]:
            match = Text("matches", style="green") if c["config_matches"] else Text(c.get("config_hash") or "-", style="yellow")
            t.add_row(Text(h), Text(c["name"]), Text(c["state"]), match, Text((c.get("image_id") or "")[7:19]))
    con = answer()
    fitted = fit_table(t, con.width)
    con.print(fitted.renderable)
    # on a terminal, lines wrap between words (the terminal would split an address); off one, whole lines
    whole = not con.is_terminal
    if fitted.cut:  # the whole reasons the cells cut short
        for error in errors.values():
            con.print(Text(error, style="red"), soft_wrap=whole)
    con.print(runtime_line(doc["runtime"]), soft_wrap=whole)
    if doc.get("gateway"):
        con.print(gateway_line(doc["gateway"]), soft_wrap=whole)
    if doc.get("keeper"):
        con.print(keeper_line(doc["keeper"]), soft_wrap=whole)
    con.print("[green]healthy[/]" if doc["healthy"] else "[red]not healthy[/]: run `sparkctl doctor` (or `sparkctl up`)")


# --- the runtime part alone: any vLLM endpoint, and the live view ----------------------------------


def endpoint_base(url: str) -> tuple[str, int, str]:
    """--endpoint URL -> (host, port), fenced like every connection sparkctl makes."""
    from urllib.parse import urlsplit

    from sparkctl.errors import InputError
    from sparkctl.transport.guard import check_address

    u = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = u.port  # always written: a bare word (`notaurl`) is a typo, not a server on port 80
    except ValueError:
        port = None
    if u.scheme != "http" or not u.hostname or port is None or u.path not in ("", "/") or u.query or u.fragment:
        raise InputError(
            f"--endpoint {url!r} is not http://HOST:PORT (with the port)",
            fix="e.g. --endpoint http://10.0.0.5:8000 (the API's base URL, without /v1)",
        )
    check_address(u.hostname, "the --endpoint URL")
    return u.hostname, port, ""


def endpoint_status(base: tuple[str, int, str], sample_seconds: float) -> dict:
    first, second = sample(base, sample_seconds)
    runtime = runtime_doc(first, second, sample_seconds)
    return {"endpoint": first.url, "healthy": runtime["health"] == 200, "runtime": runtime}


def runtime_line(r: dict) -> str:
    from rich.markup import escape

    if r["health"] is None:
        return f"runtime {r['url']}: [red]not answering[/] ({escape(r['error'] or '')})"
    parts = [f"runtime {r['url']}: /health {r['health']}", f"model {r.get('model')} (max_model_len {r.get('max_model_len')})"]
    if "running" in r:
        parts += [
            f"running {r['running']}, waiting {r['waiting']}",
            f"KV {100 * (r['kv_cache_usage'] or 0):.1f}%",
            f"{r['output_tokens_per_s']} tok/s",
        ]
        if r.get("spec_decode_acceptance_length") is not None:
            over = (
                f"over the last {r['interval_s']:g} s"
                if r.get("spec_decode_acceptance_over") == "interval"
                else f"since start: no drafts in the last {r['interval_s']:g} s"
            )
            parts.append(
                f"acceptance rate {r['spec_decode_acceptance_rate']}%, mean acceptance length "
                f"{r['spec_decode_acceptance_length']} ({over})"
            )
        if r.get("ttft_mean_s") is not None:
            parts.append(f"TTFT {r['ttft_mean_s']:.2f} s")
    elif r.get("metrics_error"):
        parts.append(f"/metrics: {escape(r['metrics_error'])}")
    return ", ".join(parts)


# --watch's columns: the runtime figure each shows, and how
WATCH_COLUMNS = {
    "tok/s": ("output_tokens_per_s", "{}"),
    "running": ("running", "{}"),
    "waiting": ("waiting", "{}"),
    "KV": ("kv_cache_usage", "{:.1%}"),
    "accept": ("spec_decode_acceptance_rate", "{:.0f}%"),
    "len": ("spec_decode_acceptance_length", "{:.2f}"),
    "TTFT": ("ttft_mean_s", "{:.2f}s"),
}


def _view(runtime: dict, hosts: Optional[dict]):
    from rich.console import Group, RenderableType
    from rich.table import Table
    from rich.text import Text

    t = Table(
        title=f"sparkctl status --watch   (every {runtime.get('interval_s', '-')} s; q or Ctrl-C quits)",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    for col in WATCH_COLUMNS:
        t.add_column(col, justify="right", no_wrap=True)
    # not answering: no figures, a row of "-"
    t.add_row(*("-" if runtime.get(key) is None else fmt.format(runtime[key]) for key, fmt in WATCH_COLUMNS.values()))
    if runtime.get("health") is None:
        head = Text(f"{runtime['url']}: not answering ({runtime.get('error')})", style="bold red")
    else:
        head = Text(
            f"{runtime['url']}: /health {runtime['health']}  {runtime.get('model') or ''}",
            style="green" if runtime["health"] == 200 else "bold red",
        )
    parts: list[RenderableType] = [head, t]
    if runtime.get("spec_decode_acceptance_over") == "since_start":
        parts.append(Text("accept, len: since the runtime started (no drafts in the last interval)", style="dim"))
    if hosts:
        ht = Table(box=None, pad_edge=False)
        for col in ("host", "container", "state"):
            ht.add_column(col, no_wrap=True)
        for h, info in hosts.items():
            for c in info["containers"]:
                ht.add_row(h, c["name"], Text(c["state"], style="green" if c["state"] == "running" else "bold red"))
        parts.append(ht)
    return Group(*parts)


@contextmanager
def _quit_key():
    """Yields quit_within(seconds): True when q was pressed on the terminal meanwhile. stdin is left
    as it was found."""
    if not sys.stdin.isatty():
        yield lambda seconds: time.sleep(seconds)
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def quit_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if ready and os.read(fd, 1) in (b"q", b"Q"):
                return True
        return False

    try:
        yield quit_within
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _line(runtime: dict, hosts: Optional[dict]) -> str:
    """One frame of --watch off a terminal: the time, the runtime line, each container's state."""
    line = f"{time.strftime('%H:%M:%S')} {runtime_line(runtime)}"
    if hosts:
        from rich.markup import escape

        line += "; containers: " + ", ".join(
            f"{h}/{c['name']} {escape(c['state'])}" for h, info in hosts.items() for c in info["containers"]
        )
    return line


def watch_view(containers, base: tuple[str, int, str], interval: float) -> None:
    """Refresh every `interval` s: figures over the last interval (not since start), each host's
    containers (`containers()`, None without an inventory). On a terminal a live view; off one (a
    pipe, a log) a line per interval, as it comes. q or Ctrl-C exits 0."""
    from contextlib import nullcontext

    from rich.live import Live

    from sparkctl.cli.output import answer
    from sparkctl.facts.endpoint import fetch

    c = answer()
    on_terminal = c.is_terminal and not c.is_dumb_terminal
    prev, t_prev, wait = fetch(*base), time.monotonic(), 0.2  # the first frame comes at once
    try:
        view = Live(console=c, auto_refresh=False, transient=False) if on_terminal else nullcontext()
        with _quit_key() as quit_within, view as live:
            while not quit_within(wait):
                cur, t_cur = fetch(*base), time.monotonic()
                runtime, hosts = runtime_doc(prev, cur, t_cur - t_prev), containers()
                if live is not None:  # on a terminal
                    live.update(_view(runtime, hosts), refresh=True)
                else:
                    c.print(_line(runtime, hosts), soft_wrap=True)
                    c.file.flush()  # a reader of the pipe sees each line when it is printed
                prev, t_prev, wait = cur, t_cur, interval
    except KeyboardInterrupt:
        pass
