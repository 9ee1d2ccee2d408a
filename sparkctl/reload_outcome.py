"""How a reload, restart or rollback ended: the words its report (`reload --json`'s `outcome`)
and its history event (events.jsonl, `sparkctl history`) carry, and which of them mean the new
config did not take.

One vocabulary for reload.py, which ends each run with one of them, and for what reads them
below or beside it: doctor's state.last_reload (checks/state.py), the fleet rollout
(fleet/rollout.py) and the keeper. A StrEnum, so each is its own word in JSON and in output.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    PLANNED = "planned"  # the report of `--check`: nothing ran
    NOTHING_TO_DO = "nothing to do"  # the new config is the one that runs
    OK = "ok"  # the new config serves
    # a step failed before anything was stopped: the old config still serves as it was. The report
    # says so; the history event is the plain FAILED
    NOTHING_STOPPED = "failed (nothing stopped)"
    FAILED = "failed"
    ROLLED_BACK = "rolled back"  # the new config failed; the last good one serves again
    ROLLBACK_FAILED = "rollback failed"  # and going back failed too: the journal stays
    # a restart that failed after it stopped something: nothing to roll back to (its config is the
    # last good one), so nothing serves until the cause is fixed
    RESTART_FAILED = "restart failed"


# the ends where the change did not happen (reload exits 1; doctor warns; a rollout stops there)
NOT_APPLIED = frozenset(
    {Outcome.NOTHING_STOPPED, Outcome.FAILED, Outcome.ROLLED_BACK, Outcome.ROLLBACK_FAILED, Outcome.RESTART_FAILED}
)
# the ends after which no run comes to set right what this one left: the runner compensates
NO_RUN_FOLLOWS = frozenset({Outcome.NOTHING_STOPPED, Outcome.ROLLBACK_FAILED, Outcome.RESTART_FAILED})
