"""`sparkctl render`: every host's launch exactly as `up` would start it, from the inventory alone."""

from __future__ import annotations

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory


def render(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Print every host's launch, from the inventory alone.

    The image, full ray/vllm command line, env with secrets redacted, mounts, devices, labels and
    config hash of every host, and of the gateway in front of the engine, without touching any host.

    Examples:
      # what up would start, into a file to review or diff
      sparkctl render -i my-cluster.yaml > launch.txt
      # the same as one JSON document
      sparkctl render --json
    """
    from sparkctl.checks.env import moe_clamp_warning
    from sparkctl.cli.output import answer, diagnostics, print_json
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.launch.plan import render as render_launch
    from sparkctl.runtime.stock_images import fork_only_warnings
    from sparkctl.transport.redact import redact, redact_obj

    inv = load_inventory(require_inventory(inventory))
    plan = render_launch(inv)
    warnings = [w for w in (moe_clamp_warning(inv), *fork_only_warnings(inv)) if w]
    if json_out:
        doc = plan.model_dump(mode="json")
        for c, spec in zip(doc["containers"], plan.containers):
            c["docker_run"] = redact(spec.docker_run())
        if plan.gateway:
            doc["gateway"]["docker_run"] = redact(plan.gateway.docker_run())
        print_json({**doc, "warnings": warnings})
        return
    import shlex

    from rich.markup import escape

    for w in warnings:  # beside the answer, not in it: `render > launch.txt` keeps the launch only
        diagnostics().print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    c = answer()
    c.print(f"cluster [bold]{plan.cluster}[/]  config hash [bold]{plan.config_hash}[/]  (start order top to bottom)")
    if plan.gateway:
        c.print(
            f"clients: {inv.hosts[plan.gateway.host].ssh.address}:{inv.runtime.port} (the gateway); "
            f"the engine behind it on :{inv.gateway.engine_port}"
        )
    for spec in plan.all_containers:
        env = redact_obj(spec.env)
        c.print(f"\n[bold]{spec.host}[/] ({spec.role}): container {spec.name}, image {spec.image}")
        # as a shell reads it (the mp lines carry the speculative config's JSON)
        line = shlex.join(spec.command) if spec.command[0] != "/bin/sh" else spec.command[2]
        c.print("  command: " + escape(redact(line)), soft_wrap=True)
        c.print("  env: " + escape(" ".join(f"{k}={v}" for k, v in env.items())), soft_wrap=True)
        c.print(
            "  mounts: " + ", ".join(f"{m.source}:{m.target}{':ro' if m.read_only else ''}" for m in spec.mounts), soft_wrap=True
        )
        c.print(
            f"  devices: {', '.join(spec.devices) or '-'}  gpus: {spec.gpus}  network: {spec.network_mode}  ipc: {spec.ipc_mode}"
        )
        c.print("  docker run: " + escape(redact(spec.docker_run())), soft_wrap=True)
