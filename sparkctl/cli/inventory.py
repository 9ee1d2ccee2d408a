"""`sparkctl inventory init | validate | show | schema`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory

app = typer.Typer(
    help="""Start, validate, show and describe inventory files.

    Examples:
      # a shipped example to edit, then check it
      sparkctl inventory init --from dspark
      sparkctl inventory validate dspark-recipe.yaml
      # its hosts, fabric links and vLLM flags as tables
      sparkctl inventory show dspark-recipe.yaml
    """,
    no_args_is_help=True,
)

FileArg = Annotated[
    Optional[Path],
    typer.Argument(help="Inventory file (default: -i FILE or $SPARKCTL_INVENTORY).", show_default=False),
]


def _path(file: Optional[Path], inventory: Optional[Path]) -> Path:
    return file if file is not None else require_inventory(inventory)


def _summary(inv) -> dict:
    return {
        "cluster": inv.cluster.name,
        "hosts": {role: inv.hosts_with_role(role) for role in ("head", "worker", "offload")},
        "tensor_parallel_size": inv.runtime.tensor_parallel_size,
        "image": inv.runtime.image,
        "served_model_name": inv.runtime.served_model_name,
    }


@app.command("validate")
def validate(
    file: FileArg = None,
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    file_only: Annotated[
        bool,
        typer.Option(
            "--file-only",
            help="Check the file alone, not this machine's SSH key and known_hosts (an inventory for another control machine, e.g. in CI).",
        ),
    ] = False,
) -> None:
    """Check an inventory without touching any host.

    Exit 0 when it is usable from this machine, 2 with every problem named (the file's, and this
    machine's SSH key and known_hosts for each host).

    Examples:
      sparkctl inventory validate my-cluster.yaml
      # the same, as one JSON document (warnings included)
      sparkctl inventory validate my-cluster.yaml --json
    """
    from sparkctl.inventory.loader import load_inventory_report

    path = _path(file, inventory)
    inv, warns = load_inventory_report(path, control_machine=not file_only)
    summary = _summary(inv)
    if json_out:
        from sparkctl.cli.output import print_json

        print_json({"ok": True, "file": str(path), **summary, "warnings": [w.to_dict(path) for w in warns]})
        return

    from rich.markup import escape

    from sparkctl.cli.output import answer, diagnostics

    roles = " · ".join(f"{role} {', '.join(names) or 'none'}" for role, names in summary["hosts"].items())
    answer().print(
        f"[bold green]ok[/] {escape(str(path))}: cluster {escape(inv.cluster.name)} · {escape(roles)} · "
        f"TP {inv.runtime.tensor_parallel_size} · image {escape(inv.runtime.image)}",
        soft_wrap=True,
    )
    for w in warns:
        diagnostics().print(f"[bold yellow]warning:[/] {escape(w.render(path))}", soft_wrap=True)


@app.command("show")
def show(file: FileArg = None, inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Print the inventory as tables.

    Hosts, fabric links, runtime (with the vLLM flag of each key), caches and Engram. A table too
    wide for the terminal is printed as records (a row's values under its first cell).

    Examples:
      sparkctl inventory show my-cluster.yaml
      # everything it holds, secrets masked, as JSON
      sparkctl inventory show my-cluster.yaml --json
    """
    from sparkctl.inventory.loader import load_inventory

    path = _path(file, inventory)
    inv = load_inventory(path)
    if json_out:
        import json
        import sys

        from sparkctl.transport.redact import redact_obj

        # Only runtime.env can hold secrets. print_json's key-name rule would also mask
        # max_num_batched_tokens, num_speculative_tokens and kv_pool_tokens ("TOKEN"), so
        # the env is redacted here and the rest written as is (one JSON document).
        doc = inv.model_dump(mode="json")
        doc["runtime"]["env"] = redact_obj(doc["runtime"]["env"])
        sys.stdout.write(json.dumps({"file": str(path), **doc}, indent=2) + "\n")
        return
    from sparkctl.cli.output import answer
    from sparkctl.cli.tables import fit_table

    c = answer()
    width = c.width
    if not c.is_terminal:
        c.width = max(width, 160)  # a pipe or a log gets whole rows; a terminal keeps its width
    try:
        for table in _tables(inv, path):
            c.print(fit_table(table, c.width).renderable)  # no address or path split across lines
    finally:
        c.width = width


def _tables(inv, path: Path) -> list:
    from rich.table import Table
    from rich.text import Text

    from sparkctl.inventory.vllm import RUNTIME_FLAGS
    from sparkctl.transport.redact import redact_obj

    def table(title: str, *columns: str) -> Table:
        t = Table(title=Text(title), title_justify="left", show_lines=False)
        for col in columns:
            t.add_column(col, overflow="fold")  # never cut a value short (fit_table wraps it between words)
        return t

    def row(t: Table, *cells) -> None:
        # Text, not markup: values come from the file and may contain [brackets].
        t.add_row(*(Text("" if v is None else str(v)) for v in cells))

    hosts = table(f"{inv.cluster.name}: hosts ({path})", "host", "role", "ssh target", "host key", "gpu", "memory")
    for name, host in inv.hosts.items():
        t = inv.ssh_target(name)
        gpu = f"{host.gpu.count}x {host.gpu.model}" if host.gpu else "-"
        memory = f"{host.memory_gib:g} GiB" if host.memory_gib else "-"
        row(hosts, name, host.role, t.where, t.host_key_policy, gpu, memory)

    links = table("fabric links", "host", "device", "rdma", "address", "mtu", "speed", "peer")
    for name, host in inv.hosts.items():
        for link in host.fabric:
            # peers are known hosts: a loaded inventory passed validate's fabric rules
            back = [o for o in inv.hosts[link.peer].fabric if o.peer == name and o.address.network == link.address.network]
            peer = f"{link.peer} ({back[0].address.ip})" if back else link.peer
            row(links, name, link.device, ", ".join(link.rdma) or "-", link.address, link.mtu, f"{link.speed_gbps:g} Gb/s", peer)

    rt = inv.runtime
    runtime = table("runtime", "key", "value", "vLLM flag")
    for key, flag in RUNTIME_FLAGS.items():
        if key != "speculative":
            value = getattr(rt, key)
            row(runtime, key, "-" if value is None else value, flag)
        elif rt.speculative:
            for sub, value in rt.speculative.model_dump(exclude_none=True).items():
                sub_flag = "(sparkctl)" if sub.startswith("drafter_") else "--speculative-config"
                row(runtime, f"speculative.{sub}", value, sub_flag)
    for key, value in redact_obj(dict(rt.env)).items():
        row(runtime, f"env.{key}", value, "(container environment)")
    if rt.custom_values:
        row(runtime, "custom_values", ", ".join(rt.custom_values), "(sparkctl: not checked against vLLM's sets)")

    caches = table("caches (per node)", "host path", "container path (VLLM_CACHE_ROOT)")
    row(caches, inv.caches.host_path, inv.caches.container_path)

    out = [hosts, links, runtime, caches]
    if inv.engram:
        e = inv.engram
        engram = table("engram", "host", "source", "size", "target (RAM)", "min free")
        row(engram, e.host, e.source, f"{e.size_gib:g} GiB", e.target, f"{e.min_free_gib:g} GiB")
        out.append(engram)
    from sparkctl.launch.keeper import KEY, UNIT, key_comment

    k = inv.keeper
    keeper = table("keeper (on the head: docs/keeper.md)", "unit", "runs", "head's own SSH key", "acts", "gives up")
    if k.enabled:
        row(
            keeper,
            UNIT,
            f"{k.sparkctl} keeper run",
            f"{KEY} ({key_comment(inv.cluster.name)}), authorised on every host",
            f"after {k.grace_s:g} s gone",
            f"after {k.max_recoveries} recoveries in {k.window_s:g} s",
        )
    else:
        row(keeper, "off (keeper.enabled: false)", "-", "-", "-", "-")
    out.append(keeper)
    return out


@app.command("schema")
def schema(json_out: JsonOpt = False) -> None:
    """Print the inventory's JSON Schema on stdout.

    For editors: completion and checks as you type.

    Examples:
      sparkctl inventory schema > inventory.schema.json
    """
    import json
    import sys

    from sparkctl.inventory.schema import inventory_schema

    sys.stdout.write(json.dumps(inventory_schema(), indent=2) + "\n")


@app.command("init")
def init(
    from_: Annotated[
        Optional[str],
        typer.Option(
            "--from",
            help="The shipped example to start from: dspark (two Sparks), splice (two Sparks + "
            "an offload host) or lab (the simulated lab).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            help="File to write (default: the example's file name in this folder; - for stdout).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a shipped example inventory, to edit for your cluster.

    Then check it with `sparkctl inventory validate`.

    Examples:
      # two Sparks, into dspark-recipe.yaml here
      sparkctl inventory init --from dspark
      # two Sparks and an x86 offload host, to a file you name
      sparkctl inventory init --from splice --out my-cluster.yaml
    """
    import os
    import sys

    from sparkctl.errors import InputError
    from sparkctl.inventory import examples

    choices = "; ".join(f"{name}: {about}" for name, (_, about) in examples.EXAMPLES.items())
    if from_ not in examples.EXAMPLES:
        said = "no --from given" if from_ is None else f"--from {from_!r} is not a shipped example"
        raise InputError(said, fix=f"pass --from {examples.CHOICES} ({choices})")
    text = examples.text(from_)
    if out is not None and str(out) == "-":
        sys.stdout.write(text)
        return
    path = out if out is not None else Path(examples.EXAMPLES[from_][0])
    if path.is_dir():
        raise InputError(f"--out {path} is a directory", fix=f"name the file to write, e.g. --out {path / 'cluster.yaml'}")
    if path.exists() and not force:
        raise InputError(f"{path} already exists", fix="pass --force to overwrite it, or --out another file")
    if not path.parent.is_dir():
        raise InputError(
            f"cannot write {path}: folder {path.parent} does not exist",
            fix=f"create it (mkdir -p {path.parent}) or pass --out a file in an existing folder",
        )
    # a whole file or none: written beside the target, then renamed over it
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {err.strerror}", fix="pass --out a writable path") from None
    if json_out:
        from sparkctl.cli.output import print_json

        print_json({"file": str(path), "from": from_, "example": examples.EXAMPLES[from_][0]})
        return
    sys.stdout.write(f"{path}\n")
    from rich.markup import escape

    from sparkctl.cli.output import diagnostics

    diagnostics().print(  # the answer is the path on stdout; this is the next step, for the person
        f"wrote {escape(str(path))} from the shipped example {from_!r}; edit it for your cluster, then: "
        f"sparkctl inventory validate {escape(str(path))}  (or export SPARKCTL_INVENTORY={escape(str(path.resolve()))})",
        soft_wrap=True,
    )
