"""Summary statistics the result file reports (numpy-free, numpy's default percentile)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Optional


def _clean(values: Iterable[Optional[float]]) -> list[float]:
    return [float(v) for v in values if v is not None]


def median(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _clean(values)
    return statistics.median(xs) if xs else None


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _clean(values)
    return statistics.fmean(xs) if xs else None


def std(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _clean(values)
    return statistics.pstdev(xs) if xs else None


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """The q-th percentile with linear interpolation, as numpy.percentile (and vllm bench serve) computes it."""
    xs = sorted(_clean(values))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
