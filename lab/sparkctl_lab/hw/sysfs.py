"""`python -m sparkctl_lab.hw.sysfs HOST`: resync a host's simulated sysfs files from inside it.

The host init calls `state.sync_sys` on every link change; this entry point is for hand use.
"""

from __future__ import annotations

import sys

from sparkctl_lab.hw import state

if __name__ == "__main__":
    state.sync_sys(sys.argv[1], state.host_operstates())
