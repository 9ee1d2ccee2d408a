"""`python -m sparkctl.gateway [options]`: run the gateway (options: --help; each has a
SPARKCTL_GATEWAY_* variable)."""

from __future__ import annotations

import asyncio
import logging
import sys

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
    try:  # after parse: --help and bad options need none of the server stack
        from .server import run
    except ImportError as e:
        print(
            f"gateway: {e.name or e} is not installed here; the gateway runs from the engine's image (vLLM ships "
            "aiohttp and prometheus_client), or install it with `pip install 'sparkctl[gateway]'`",
            file=sys.stderr,
        )
        return 1
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s gateway: %(message)s")
    try:
        _event_loop_run()(run(settings))
    except OSError as e:  # the port or the socket cannot be had
        print(f"gateway: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
