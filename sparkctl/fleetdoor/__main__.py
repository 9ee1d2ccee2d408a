"""`python -m sparkctl.fleetdoor [options]`: run the fleet's front door (options: --help; each has a
SPARKCTL_FLEETDOOR_* variable)."""

from __future__ import annotations

import sys

from .settings import parse


def _server_run():
    from .server import run

    return run


def main(argv: list[str] | None = None) -> int:
    from sparkctl.gateway.__main__ import serve

    # parse first: --help and bad options need none of the server stack
    return serve("fleet door", parse(argv), _server_run)


if __name__ == "__main__":
    sys.exit(main())
