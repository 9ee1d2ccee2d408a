"""The unit suite's CPU and wall, per test file (issue 25: which files to make cheaper).

    python benchmarks/unit_cpu_per_file.py [pytest args]     e.g. tests/unit -x

Runs pytest in this process with a plugin that takes, around each test (its fixtures included),
this process's CPU and that of the children it has reaped (the simulators, gateways and forked
sparkctl runs the tests start and stop), and prints CPU-seconds and wall per file, most CPU first.
A child still running when a test ends counts towards the test that stops it; a grandchild its
parent never waits for (a daemonized Ray stand-in) is not counted: `accton` counts those.
"""

from __future__ import annotations

import collections
import resource
import sys
import time

import pytest


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class PerFile:
    def __init__(self) -> None:
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.wall: dict[str, float] = collections.defaultdict(float)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu, t0 = _cpu(), time.monotonic()
        yield
        path = item.nodeid.split("::")[0]
        self.cpu[path] += _cpu() - cpu
        self.wall[path] += time.monotonic() - t0


def main(argv: list[str]) -> int:
    per = PerFile()
    rc = pytest.main(["-q", "-p", "no:cacheprovider", *(argv or ["tests/unit"])], plugins=[per])
    print(f"{'CPU-s':>8} {'wall s':>8}  file")
    for path in sorted(per.cpu, key=per.cpu.get, reverse=True):
        print(f"{per.cpu[path]:8.1f} {per.wall[path]:8.1f}  {path}")
    print(f"{sum(per.cpu.values()):8.1f} {sum(per.wall.values()):8.1f}  in all ({len(per.cpu)} files; pytest exit {int(rc)})")
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
