"""`python -m sparkctl.gateway [options]`: run the gateway (options: --help; each has a
SPARKCTL_GATEWAY_* variable)."""

from __future__ import annotations

import asyncio
import logging
import sys

from .server import run
from .settings import parse


def _event_loop_run():
    """uvloop's run where it is installed (vLLM's image has it: vLLM serves on it), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s gateway: %(message)s")
    try:
        _event_loop_run()(run(settings))
    except OSError as e:  # the port or the socket cannot be had
        print(f"gateway: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
