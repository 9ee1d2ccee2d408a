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


def serve(label: str, settings, load_run) -> int:
    """Run a server of this package's kind (the gateway, the fleet door): `load_run()` imports its
    `run` (aiohttp and prometheus_client: missing, exit 1 saying where they come from), then run it
    on the best event loop until SIGTERM; a port or socket it cannot have is exit 1, not a traceback."""
    try:
        run = load_run()
    except ImportError as e:
        print(
            f"{label}: {e.name or e} is not installed here; the {label} runs from the engine's image (vLLM ships "
            "aiohttp and prometheus_client), or install it with `pip install 'sparkctl[gateway]'`",
            file=sys.stderr,
        )
        return 1
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s %(levelname)s {label}: %(message)s")
    try:
        _event_loop_run()(run(settings))
    except OSError as e:  # the port or the socket cannot be had
        print(f"{label}: {e}", file=sys.stderr)
        return 1
    return 0


def _server_run():
    from .server import run

    return run


def main(argv: list[str] | None = None) -> int:
    # parse first: --help and bad options need none of the server stack
    return serve("gateway", parse(argv), _server_run)


if __name__ == "__main__":
    sys.exit(main())
