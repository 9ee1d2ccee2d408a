"""`sparkctl bench [OPTIONS]`, `sparkctl bench compare A.json B.json`, `sparkctl bench schema`.

Measures any OpenAI-compatible endpoint (sparkctl-managed or not) with the sparkdash protocol (the
sPLIce build's benchmark: seed 000), speculative acceptance from /metrics, acceptance against context length, prefill and
mixed traffic. The protocol lives in sparkctl/bench/; this module only wires options and output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt

app = typer.Typer(
    help="Measure tok/s, TTFT, speculative acceptance and mixed traffic.\n\n"
    "On an endpoint (the sparkdash protocol: three workloads at 1 and 4 streams). Subcommands: report, compare, schema.\n\n"
    "Examples:\n"
    "  # the whole protocol through the front door, with its report\n"
    "  sparkctl bench --out run.json --report report/\n"
    "  # any OpenAI-compatible endpoint, throughput only\n"
    "  sparkctl bench --endpoint http://10.0.0.5:8000/v1 --parts throughput\n"
    "  # two runs side by side\n"
    "  sparkctl bench compare before.json after.json\n",
    invoke_without_command=True,
    no_args_is_help=False,
)


def parse_tokens(text: str | int) -> int:
    """A token count as vLLM and the inventory read one ('32k' -> 32000, '32K' -> 32768); an int
    default passes as it is."""
    from sparkctl.inventory.vllm import token_count

    return text if isinstance(text, int) else token_count(text)


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _ints(text: str, what: str, example: str = "1K,8K,32K") -> list[int]:
    from sparkctl.errors import InputError

    try:
        return [parse_tokens(p) for p in _csv(text)]
    except ValueError as err:
        raise InputError(f"{what}: {err}", fix=f"write {what} as a comma-separated list, e.g. {what} {example}") from None


MAX_STREAMS = 1024  # far above any max_num_seqs a Spark pair serves; a typo (4000000) must not open that many


def _counts(text: str, what: str) -> list[int]:
    """Whole numbers >= 1 (streams are counted, not token sizes: no k/m suffixes)."""
    from sparkctl.errors import InputError

    def ok(p: str) -> bool:
        return p.isdecimal() and 1 <= int(p) <= MAX_STREAMS

    parts = _csv(text)
    if not parts or not all(ok(p) for p in parts):
        bad = next((p for p in parts if not ok(p)), text)
        raise InputError(
            f"{what} {text!r}: {bad!r} is not a number of concurrent streams (a whole number, 1 to {MAX_STREAMS})",
            fix=f"write {what} as a comma-separated list of whole numbers, e.g. {what} 1,4",
        )
    return [int(p) for p in parts]


# BenchOptions field -> the option that sets it, so a refused value names what the operator typed
OPTION_OF = {
    "workloads": "--workloads",
    "streams": "--streams",
    "max_tokens": "--tokens",
    "repeats": "--repeats",
    "temperature": "--temperature",
    "parts": "--parts",
    "context_workload": "--context-workload",
    "context_sizes": "--context-sizes",
    "context_repeats": "--context-repeats",
    "prefill_tokens": "--prefill-tokens",
    "overhead_samples": "--overhead-samples",
    "mixed_tokens": "--mixed-tokens",
    "mixed_delay_s": "--mixed-delay",
    "warmup": "--warmup",
    "timeout_s": "--timeout",
}


def _option_error(err) -> Exception:
    """A BenchOptions ValidationError as the option and value the operator gave, and what it takes."""
    import re

    from sparkctl.errors import InputError

    first = err.errors(include_url=False)[0]
    option = OPTION_OF.get(str(first["loc"][0]), str(first["loc"][0]))
    if first["type"] == "literal_error":
        allowed = re.findall(r"'([^']*)'", str((first.get("ctx") or {}).get("expected", "")))
        return InputError(
            f"{option} {first['input']!r}: must be one of {', '.join(allowed)}",
            fix=f"e.g. {option} {','.join(allowed)} (comma-separated)",
        )
    message = str(first["msg"]).removeprefix("Value error, ")
    given = first["input"]
    given = ",".join(map(str, given)) if isinstance(given, list) else given
    return InputError(f"{option} {given!r}: {message}", fix=f"see `sparkctl bench --help` for {option}")


def _endpoint_from_inventory(path: Path, direct: bool = False) -> tuple[str, str]:
    """http://<head ssh address>:<runtime.port>/v1 (the front door, what clients use; with direct
    the engine behind it: on the head's loopback, so through the gateway's engine route, never
    held) and runtime.served_model_name."""
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.launch.endpoints import engine_endpoint

    inv = load_inventory(path)  # a valid inventory has exactly one head
    address, port, prefix = engine_endpoint(inv)
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}{prefix if direct else ''}/v1", inv.runtime.served_model_name


class _RichProgress:
    """The run's progress on stderr: a bar (requests done / planned) on a terminal, and one line per
    step otherwise (logs and pipes get no animation, but still see where a long run is)."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._console = console
        self._p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self._task = self._p.add_task("starting", total=None)  # the total is known after discovery

    def __enter__(self):
        self._p.start()
        return self

    def __exit__(self, *exc):
        self._p.stop()

    def start(self, total: int) -> None:
        self._p.update(self._task, total=total)

    def advance(self) -> None:
        self._p.advance(self._task)

    def describe(self, description: str) -> None:
        task = self._p.tasks[0]
        if self._p.disable and description != task.description:
            count = f"[{task.completed:.0f}/{task.total:.0f}] " if task.total else ""
            self._console.print(f"{count}{description}", highlight=False, soft_wrap=True, markup=False)
        self._p.update(self._task, description=description)


def _write(path: Path, result) -> None:
    from sparkctl.errors import InputError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=2) + "\n")
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror}", fix="pass --out a writable path") from err


@app.callback()
def bench(
    ctx: typer.Context,
    endpoint: Annotated[
        Optional[str],
        typer.Option(
            "--endpoint",
            help="OpenAI-compatible base URL, e.g. http://HOST:8888/v1 (default: the inventory's head and runtime.port: "
            "through the front door, what clients feel).",
            show_default=False,
        ),
    ] = None,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct",
            help="With the inventory's endpoint: measure the engine itself, never held (it listens on the head's "
            "loopback behind the gateway: through the gateway's /gateway/engine route).",
        ),
    ] = False,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            help="Model id to ask for (default: runtime.served_model_name, or the only model the endpoint lists).",
            show_default=False,
        ),
    ] = None,
    inventory: InventoryOpt = None,
    api_key: Annotated[
        Optional[str],
        typer.Option(
            "--api-key",
            envvar="SPARKCTL_BENCH_API_KEY",
            help="Bearer token, if the endpoint needs one (never written to the result).",
            show_default=False,
        ),
    ] = None,
    workloads: Annotated[str, typer.Option("--workloads", help="Workloads: counting, code, prose.")] = "counting,code,prose",
    streams: Annotated[str, typer.Option("--streams", help="Concurrent streams per cell.")] = "1,4",
    tokens: Annotated[int, typer.Option("--tokens", parser=parse_tokens, help="Tokens generated per request.")] = 400,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Repeats per cell (the median is reported).")] = 3,
    parts: Annotated[
        str, typer.Option("--parts", help="Which parts run: throughput, context, prefill, mixed.")
    ] = "throughput,context,prefill,mixed",
    context_workload: Annotated[str, typer.Option("--context-workload", help="Workload of the context sweep.")] = "code",
    context_sizes: Annotated[
        str,
        typer.Option(
            "--context-sizes", help="Prompt sizes of the context sweep (tokens, as vLLM reads them: 32K = 32768, 32k = 32000)."
        ),
    ] = "1K,8K,32K,80K",
    context_repeats: Annotated[int, typer.Option("--context-repeats", min=1, help="Requests per context size.")] = 1,
    prefill_tokens: Annotated[
        int,
        typer.Option(
            "--prefill-tokens",
            parser=parse_tokens,
            show_default="256K",
            help="Long prompt of the prefill test (capped by max_model_len).",
        ),
    ] = 256 * 1024,
    overhead_samples: Annotated[
        int, typer.Option("--overhead-samples", min=1, help="Short requests measuring the fixed overhead.")
    ] = 3,
    mixed_tokens: Annotated[
        Optional[int],
        typer.Option(
            "--mixed-tokens",
            parser=parse_tokens,
            help="Long cold prompt of the mixed test (default: --prefill-tokens).",
            show_default=False,
        ),
    ] = None,
    mixed_delay: Annotated[
        Optional[float],
        typer.Option(
            "--mixed-delay",
            min=0,
            help="Seconds at least between the long and the short "
            "request, which also waits until /metrics shows the long one running "
            "(default: a tenth of the prefill TTFT, or 0.5).",
            show_default=False,
        ),
    ] = None,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos/--no-ignore-eos", help="Send vLLM's ignore_eos/min_tokens so every request generates --tokens tokens."
        ),
    ] = True,
    thinking: Annotated[bool, typer.Option("--thinking/--no-thinking", help="chat_template_kwargs.enable_thinking.")] = False,
    temperature: Annotated[float, typer.Option("--temperature", min=0)] = 0.0,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Unmeasured requests first.")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", help="Longest wait for one request, s (1 or more).")] = 1800.0,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Write the result file here (JSON; schema: `sparkctl bench schema`).", show_default=False),
    ] = None,
    report: Annotated[
        Optional[Path],
        typer.Option(
            "--report",
            help="Also write the HTML report and its PNG plots into this folder (as `sparkctl bench report`).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    import sys

    from pydantic import ValidationError

    from sparkctl import interrupts
    from sparkctl.bench.protocol import BenchOptions
    from sparkctl.bench.report import render
    from sparkctl.bench.runner import BenchRunner
    from sparkctl.cli.options import check_seconds
    from sparkctl.cli.output import answer, diagnostics, print_json
    from sparkctl.errors import InputError
    from sparkctl.runtime.openai_client import Endpoint

    check_seconds("--timeout", timeout, low=1, high=86400, example="1800")
    check_seconds("--mixed-delay", mixed_delay, low=0, high=600, example="0.5")
    if report is not None:
        from sparkctl.bench.plots import require

        require("--report")  # before the run: a long bench must not end without its report
    if direct and endpoint is not None:
        raise InputError("--direct measures the inventory's engine, not --endpoint", fix="drop one of --direct and --endpoint")
    if endpoint is None:
        if inventory is None:
            raise InputError(
                "no endpoint to measure",
                fix="pass --endpoint http://HOST:PORT/v1 (and --model), or -i INVENTORY (or set SPARKCTL_INVENTORY)",
            )
        endpoint, inv_model = _endpoint_from_inventory(inventory, direct)
        model = model or inv_model
    try:
        options = BenchOptions(
            workloads=_csv(workloads),
            streams=_counts(streams, "--streams"),
            max_tokens=tokens,
            repeats=repeats,
            temperature=temperature,
            thinking=thinking,
            ignore_eos=ignore_eos,
            parts=_csv(parts),
            context_workload=context_workload,
            context_sizes=_ints(context_sizes, "--context-sizes"),
            context_repeats=context_repeats,
            prefill_tokens=prefill_tokens,
            overhead_samples=overhead_samples,
            mixed_tokens=mixed_tokens,
            mixed_delay_s=mixed_delay,
            warmup=warmup,
            timeout_s=timeout,
        )
    except ValidationError as err:
        raise _option_error(err) from None

    runner = BenchRunner(Endpoint(endpoint, model, api_key, timeout), options)
    c = answer()
    interrupted = False
    with _RichProgress(diagnostics()) as progress:
        runner.progress = progress
        try:
            interrupts.run_async(runner.run())
        except KeyboardInterrupt:
            interrupted = True
    result = runner.finish(interrupted=interrupted) if interrupted else runner.result
    if out is not None:
        _write(out, result)
    written = []
    if report is not None:
        from sparkctl.bench.html import write_report
        from sparkctl.bench.plots import Labeled

        written = write_report([Labeled(out.stem if out is not None else "this run", result)], report)
    if json_out:
        print_json(result.model_dump(mode="json"))
    else:
        render(result, c)
        if out is not None:
            c.print(f"result written to {out}")
        if written:
            c.print(f"report written to {written[0]} (plots: {', '.join(p.name for p in written[1:])})")
    if interrupted:
        sys.exit(130)
    if runner.failed_requests:
        raise typer.Exit(1)  # the file and the table hold them; a failed request is a failed step


@app.command("report")
def report_cmd(
    results: Annotated[list[Path], typer.Argument(help="Result files (`sparkctl bench --out`), drawn side by side.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for report.html and the PNG plots.")],
    json_out: JsonOpt = False,
) -> None:
    """Write an HTML report of result files, and its plots as PNG files.

    One HTML file, plots embedded, that opens offline.

    Examples:
      sparkctl bench report run.json --out report/
      # two runs drawn side by side
      sparkctl bench report before.json after.json --out report/
    """
    from sparkctl.bench.compare import load
    from sparkctl.bench.html import labels_for, write_report
    from sparkctl.bench.plots import Labeled, require
    from sparkctl.cli.output import answer, print_json

    require("`sparkctl bench report`")  # plots.py imports matplotlib only when it draws
    written = write_report([Labeled(label, load(p)) for label, p in zip(labels_for(results), results)], out)
    if json_out:
        print_json({"report": str(written[0]), "plots": [str(p) for p in written[1:]]})
    else:
        answer().print(f"report written to {written[0]}")
        for p in written[1:]:
            answer().print(f"  plot {p}")


@app.command("compare")
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Result file A (the baseline).")],
    b: Annotated[Path, typer.Argument(help="Result file B (ratios are B / A).")],
    json_out: JsonOpt = False,
) -> None:
    """Show two result files side by side, with B/A ratios.

    Examples:
      sparkctl bench compare before.json after.json
    """
    from sparkctl.bench.compare import compare, load, render
    from sparkctl.cli.output import answer, print_json

    cmp = compare(load(a), load(b), str(a), str(b))
    if json_out:
        print_json(cmp.model_dump(mode="json"))
    else:
        render(cmp, answer())


@app.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of the result file.

    The same as docs/bench-result.schema.json.

    Examples:
      sparkctl bench schema > bench-result.schema.json
    """
    from sparkctl.bench.result import json_schema
    from sparkctl.cli.output import print_json

    print_json(json_schema())
