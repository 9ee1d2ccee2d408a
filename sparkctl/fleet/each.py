"""One function over every member of a fleet at once: a thread per member, each member's own
outcome (its value, or the error that stopped it), never one member's error hiding the others'.

A fleet's members are independent clusters, each already parallel over its own hosts (the cluster
session), so the fleet's commands take about one member's time, not the sum of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

from sparkctl.errors import SparkctlError


@dataclass
class MemberOutcome:
    member: str
    value: Any = None
    error: Optional[SparkctlError] = None  # what stopped this member's run (its message and fix)

    @property
    def ok(self) -> bool:
        return self.error is None


def each_member(members: list, fn: Callable[[Any], Any]) -> dict[str, MemberOutcome]:
    """fn(member) for every member at once; name -> outcome, in the fleet's order. A sparkctl
    error is the member's outcome; anything else (a bug) too, named as one, so the others finish."""

    def one(m) -> MemberOutcome:
        try:
            return MemberOutcome(m.name, value=fn(m))
        except SparkctlError as err:
            return MemberOutcome(m.name, error=err)
        except Exception as exc:  # a bug in one member's run must not hide the others' results
            return MemberOutcome(
                m.name,
                error=SparkctlError(
                    f"{type(exc).__name__}: {exc}", fix="a sparkctl bug: report it with the command's --json output"
                ),
            )

    if not members:
        return {}
    with ThreadPoolExecutor(max_workers=len(members), thread_name_prefix="sparkctl-member") as pool:
        return {o.member: o for o in pool.map(one, members)}
