"""The lab's second pair and the fleet on it, shared by every lab test that needs them.

Bringing the pair up (its image pull and cold start) and the first `fleet up` cost ~20 s, and
taking the pair away ~4 s: paid once per session, not once per file. tests/conftest.py RUN_LAST
orders the files that use them together, after every other lab test (the rest of the suite sees
the one-pair lab): test_lab_clusters.py (it brings the pair up), the fleet files, then
test_lab_pair_removal.py, which takes the pair away and asserts nothing of it is left. Should that
file not run (`-k`), the session's end takes the pair away.

    second_pair  (session) `sparkctl lab up --clusters 2`'s document (the call that added the pair)
    fleet_lab    (session) `sparkctl fleet up`'s document, every member passing at the front door
"""

from __future__ import annotations

import time

import pytest
from labcli import lab_cli, sparkctl, wait_passing


@pytest.fixture(scope="session")
def second_pair(lab):
    doc = lab_cli("up", "--clusters", "2")
    yield doc
    if lab.clusters() == 2:
        lab.up(clusters=1)


@pytest.fixture(scope="session")
def fleet_lab(lab, second_pair):
    t0 = time.monotonic()
    first = sparkctl("fleet", "up", "-f", str(lab.FLEET_PATH))
    print(f"\nfleet up on the two pairs: {time.monotonic() - t0:.1f} s ({first['outcome']})")
    assert wait_passing(lab) == {"lab": "passing", "lab-2": "passing"}
    yield first
    lab.host_exec("head", ["docker", "rm", "-f", "sparkctl-fleet-door"])
