"""`vllm` entry point of the simulator image: `vllm serve ...`, `vllm --version`.

The image runs it as `python3 -m sparkctl_lab.sim.vllm_cli "$@"`.
"""

from __future__ import annotations

import os
import sys

from . import knobs as knobs_mod
from . import serve_args

SUBCOMMANDS = ["chat", "complete", "serve", "bench", "collect-env", "run-batch"]
TOP_USAGE = "usage: vllm [-h] [-v] {" + ",".join(SUBCOMMANDS) + "} ..."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # docker logs must see lines as they happen
        except (AttributeError, ValueError):
            pass
    k = knobs_mod.load()
    if not argv or argv[0] in ("-h", "--help"):
        print(TOP_USAGE)
        print(
            "\nvLLM CLI\n\npositional arguments:\n  {"
            + ",".join(SUBCOMMANDS)
            + "}\n    serve    Launch a local OpenAI-compatible API server."
        )
        return 0
    if argv[0] in ("-v", "--version"):
        print(k.vllm_version)
        return 0
    if argv[0] != "serve":
        sys.stderr.write(TOP_USAGE + "\n")
        sys.stderr.write(
            f"vllm: error: argument subparser: invalid choice: '{argv[0]}' (choose from "
            + ", ".join(f"'{c}'" for c in SUBCOMMANDS)
            + ")\n"
        )
        return 2
    cfg = serve_args.parse(argv[1:])  # argparse exits 2 with vLLM's usage/error on bad flags
    from . import server

    env = dict(os.environ)
    try:
        serve_args.check_headless(cfg)
    except serve_args.StartupError as e:
        server.print_startup_error(str(e))
        return 1
    if cfg.headless:
        return server.run_headless(cfg, k, env)
    return server.serve(cfg, k, env)


if __name__ == "__main__":
    sys.exit(main())
