"""How the engine's next start will go: warm or cold, and how long this cluster's history says it
takes. Read by reload's plan (what `--check` shows) and by the stop step (the gateway's hold is told
the same expected start), so the two can never disagree."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.inventory.models import Inventory
    from sparkctl.records import AppliedRecord, Event


@dataclass(frozen=True)
class StartForecast:
    cache: str  # warm | cold
    seconds: Optional[float]  # the median of this cluster's past starts of that kind; None without history


def expected_seconds(events: list[Event], cache: Optional[str]) -> Optional[float]:
    """The median start time of this cluster's past warm (or cold) starts."""
    if not cache:
        return None
    seen = [e.start_seconds for e in events if e.cache == cache and e.start_seconds]
    return statistics.median_high(seen) if seen else None


def forecast(inventory: dict, recorded: Optional[AppliedRecord], events: list[Event], cache_warm: bool) -> StartForecast:
    """Warm when the engine's compile inputs (compile_cache.compile_key) are ones this cluster has
    served (an applied or reloaded event, or the recorded config) and the head's cache holds
    compiled graphs; cold otherwise."""
    from sparkctl.runtime.compile_cache import compile_key

    served = {e.compile_key for e in events if e.outcome in ("applied", "ok")}
    if recorded:
        served.add(compile_key(recorded.inventory))
    cache = "warm" if cache_warm and compile_key(inventory) in served else "cold"
    return StartForecast(cache, expected_seconds(events, cache))


def of_head(inv: Inventory, head_facts: HostFacts) -> StartForecast:
    """The forecast from the head's facts (`applied`, `events`, `cache`), for `inv`'s start."""
    cache = head_facts.cache
    return forecast(inv.model_dump(mode="json"), head_facts.applied, list(head_facts.events), bool(cache and cache.warm_hashes))
