"""`python -m sparkctl.fleetdoor [options]`: run the fleet's front door (options: --help; each has a
SPARKCTL_FLEETDOOR_* variable)."""

from __future__ import annotations

import logging
import sys

from .settings import parse


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    try:  # after parse: --help and bad options need none of the server stack
        from sparkctl.gateway.__main__ import _event_loop_run

        from .server import run
    except ImportError as e:
        print(
            f"fleet door: {e.name or e} is not installed here; it runs from the engine's image (vLLM ships "
            "aiohttp and prometheus_client), or install it with `pip install 'sparkctl[gateway]'`",
            file=sys.stderr,
        )
        return 1
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s fleetdoor: %(message)s")
    try:
        _event_loop_run()(run(settings))
    except OSError as e:  # the port or the socket cannot be had
        print(f"fleet door: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
