"""Long prompts of a chosen size in tokens, without a tokenizer.

Filler is generated in lines; how many tokens a line costs is measured once per filler kind from the
server's own usage.prompt_tokens (two calibration requests), so the sizes hold for any model. Every
long prompt starts with a unique tag so the prefix cache can never serve it: long prompts are cold.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Literal

Kind = Literal["code", "prose"]

_WORDS = (
    "harbor river ledger signal copper window orchard lantern meadow archive engine valley "
    "compass timber garden canyon beacon thread marble quarry summit forest island bridge "
    "market winter harvest chapter letter morning station journey village circuit season "
    "mirror silver anchor granite pepper willow falcon saddle plaza velvet ribbon tunnel"
).split()

CALIBRATION_LINES = 256


def filler(kind: Kind, lines: int, seed: int) -> str:
    """`lines` lines of deterministic code-like or prose-like text."""
    rng = random.Random(f"{kind}:{seed}")
    out: list[str] = []
    if kind == "code":
        for _ in range(lines):
            a, b = rng.choice(_WORDS), rng.choice(_WORDS)
            out.append(
                f"def {a}_{b}_{rng.randint(1000, 9999)}(x, y={rng.randint(100, 999)}): return {a}_table[x % {rng.randint(10, 97)}] + y"
            )
    else:
        for _ in range(lines):
            words = [rng.choice(_WORDS) for _ in range(12)]
            out.append(" ".join(words).capitalize() + ".")
    return "\n".join(out)


def tagged(body: str, question: str) -> str:
    """A cold prompt: unique tag first (defeats prefix caching), then the body, then the question."""
    return f"[request {uuid.uuid4().hex}]\n{body}\n\n{question}"


@dataclass
class Calibration:
    """Tokens of a prompt with no filler, and tokens each filler line adds, as the server counts them."""

    base_tokens: int
    tokens_per_line: float

    def lines_for(self, target_tokens: int) -> int:
        if self.tokens_per_line <= 0:
            return 0
        return max(0, int((target_tokens - self.base_tokens) / self.tokens_per_line))

    @classmethod
    def from_probes(cls, base_tokens: int, probe_tokens: int, probe_lines: int = CALIBRATION_LINES) -> "Calibration":
        return cls(base_tokens, max(0.0, (probe_tokens - base_tokens) / probe_lines))
