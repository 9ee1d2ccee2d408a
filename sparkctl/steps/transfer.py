"""A transfer under way on a host (a download, a copy): bytes moved of the total, the rate, the time left.

A step hands one to the runner's progress callback (RunContext.progress) in place of a phase's
text: the live report draws it as a bar on a terminal and writes it as one line per reading off
one (cli/steps_output.py); anything else that reads progress sees its text (str()).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

GB = 1e9


def gb(n: float) -> str:
    return f"{_gb_figure(n)} GB"


def _gb_figure(n: float) -> str:
    return f"{n / GB:.2f}" if n < 100 * GB else f"{n / GB:.0f}"


def duration(seconds: float) -> str:
    if seconds < 1:
        return "under 1 s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass(frozen=True)
class Transfer:
    doing: str  # what moves, from where to where: "copying from head over enp1s0f0np0"
    done: int  # bytes at the receiving end so far (a resumed transfer starts above 0)
    total: int  # bytes when it is complete
    rate: float = 0.0  # bytes per second since the first reading (0: not known yet)

    @property
    def seconds_left(self) -> Optional[float]:
        return (self.total - self.done) / self.rate if self.rate > 0 and self.done < self.total else None

    @property
    def amounts(self) -> str:
        """'0.12 GB of 0.19 GB, 118 MB/s, 1 s left': the figures, without what moves."""
        text = f"{gb(min(self.done, self.total))} of {gb(self.total)}"
        if self.rate > 0:
            text += f", {self.rate / 1e6:.0f} MB/s"
        left = self.seconds_left
        return text + (f", {duration(left)} left" if left is not None else "")

    def short(self, with_rate: bool = True) -> str:
        """'0.12/0.19 GB, 118 MB/s, 1 s left': the figures beside a bar (the rate left out where room is short)."""
        text = f"{_gb_figure(min(self.done, self.total))}/{gb(self.total)}"
        if self.rate > 0 and with_rate:
            text += f", {self.rate / 1e6:.0f} MB/s"
        left = self.seconds_left
        return text + (f", {duration(left)} left" if left is not None else "")

    def __str__(self) -> str:
        return f"{self.doing}: {self.amounts}"


Phase = Union[str, Transfer]  # what a step says it is doing, for RunContext.progress
