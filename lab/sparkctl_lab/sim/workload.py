"""Tokens and text: the simulator's tokenizer, the workload a prompt belongs to, and the output.

Tokenizer: one token per word (a run of letters/digits/underscore) and one per other non-space
character; DeepSeek's special markers (`<｜User｜>`, `</think>`, ...) are one token each.
Whitespace is free. So "count from 1 to 10." is 6 tokens and the output "1, 2, 3" is 5.

Workload (decides speculative acceptance): a prompt asking to count from A to B is `counting`;
one that looks like code or asks for code is `code`; everything else is `prose`.

Output is deterministic for a prompt at temperature 0 (seeded by the prompt), and varies with
`seed` otherwise.
"""

from __future__ import annotations

import hashlib
import random
import re
import zlib

TOKEN_RE = re.compile(r"<｜[^｜]{0,40}｜>|</?think>|\w+|[^\w\s]", re.UNICODE)
SPACED_TOKEN_RE = re.compile(r"\s*(?:" + TOKEN_RE.pattern + ")")  # a token with the whitespace before it
COUNT_RE = re.compile(r"\bcount(?:ing)?\b[^0-9]{0,40}?(?:from\s+)?(-?\d+)\s*(?:to|through|until|-)\s*(-?\d+)", re.I)
CODE_HINT_RE = re.compile(
    r"```|\bdef\s+\w+\(|\bclass\s+\w+|#include|\bfunction\b|\breturn\b|\bimport\s+\w+|=>|;\s*$|\{\s*$|"
    r"\b(?:python|javascript|typescript|rust|golang|java|c\+\+|bash|sql|code|program|script|implement|refactor|"
    r"function|algorithm|regex|compile|unit test|api)\b",
    re.I | re.M,
)

BOS = "<｜begin▁of▁sentence｜>"


def token_ids(text: str) -> list[int]:
    """Stable ids for prefix caching (the same text gives the same ids in every process)."""
    return [zlib.crc32(t.encode("utf-8")) for t in TOKEN_RE.findall(text)]


def _text(content) -> str:
    """A message's content: a string, or OpenAI content parts."""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def render_chat(messages: list[dict], enable_thinking: bool = True, add_generation_prompt: bool = True) -> str:
    """DeepSeek's chat template, reduced to the shape that matters for token counts."""
    parts = [BOS]
    for m in messages:
        role, content = m.get("role", "user"), _text(m.get("content"))
        if role == "system":
            parts.append(content)
        elif role == "user":
            parts.append("<｜User｜>" + content)
        elif role == "assistant":
            parts.append("<｜Assistant｜></think>" + content + "<｜end▁of▁sentence｜>")
        else:  # tool and others
            parts.append("<｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>")
    if add_generation_prompt:
        parts.append("<｜Assistant｜>" + ("<think>" if enable_thinking else "</think>"))
    return "".join(parts)


def last_user_text(messages: list[dict]) -> str:
    return next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def classify(text: str) -> str:
    if COUNT_RE.search(text):
        return "counting"
    if CODE_HINT_RE.search(text):
        return "code"
    return "prose"


def seed_for(text: str, seed: int | None, temperature: float) -> int:
    if temperature <= 0 or seed is not None:
        h = hashlib.sha256(text.encode("utf-8", "replace")).digest()
        return int.from_bytes(h[:8], "big") ^ (seed or 0)
    return random.SystemRandom().getrandbits(63)


_CODE_LINES = [
    "def {name}(items, limit={n}):",
    '    """Return the first {n} items that pass the check."""',
    "    result = []",
    "    for index, item in enumerate(items):",
    "        if index >= limit:",
    "            break",
    "        if item is not None and item.value > {n}:",
    "            result.append(item)",
    "    return result",
    "",
    "class {cls}:",
    "    def __init__(self, name, size={n}):",
    "        self.name = name",
    "        self.size = size",
    "",
    "    def scale(self, factor):",
    "        return {cls}(self.name, self.size * factor)",
    "",
]
_NAMES = ["select_items", "filter_values", "collect_batch", "read_chunks", "merge_pages", "parse_rows"]
_CLASSES = ["Record", "Window", "Batch", "Segment", "Buffer", "Entry"]
_PROSE = (
    "The morning light settled over the valley as the travellers gathered their things and set out "
    "along the river. Nobody spoke for a while; the only sound was the water and the slow crunch of "
    "gravel under their boots. Later, when the path climbed towards the ridge, someone began to talk "
    "about the harvest, about the old mill that had burned, and about a letter that had never arrived. "
    "Each of them remembered it differently, and each version changed a little with the telling. "
    "By noon the clouds had thinned, the wind had turned warm, and the village below looked smaller "
    "than any of them had expected."
).split(" ")


class TextStream:
    """Produces the output tokens of one request, deterministically for its seed."""

    def __init__(self, workload: str, prompt_text: str, seed: int, ignore_eos: bool):
        self.workload = workload
        self.rng = random.Random(seed)
        self.ignore_eos = ignore_eos
        self._pending: list[str] = []
        self.eos = False
        # counting: from A to B as the prompt asks, 1 to 1000 if it names no range
        m = COUNT_RE.search(prompt_text) if workload == "counting" else None
        self._count_next, self._count_end = (int(m.group(1)), int(m.group(2))) if m else (1, 1000)
        self._count_step = 1 if self._count_end >= self._count_next else -1
        self._started = False
        # A natural answer length for code/prose (long enough for 400-token benchmarks).
        self.natural_len = self.rng.randint(900, 2200)
        self.produced = 0

    def _refill(self) -> None:
        if self.workload == "counting":
            past_end = (self._count_next - self._count_end) * self._count_step > 0
            if past_end and self._started and not self.ignore_eos:
                self.eos = True
                return
            self._pending += [",", f" {self._count_next}"] if self._started else [str(self._count_next)]
            self._started = True
            self._count_next += self._count_step
        elif not self.ignore_eos and self.produced >= self.natural_len:
            self.eos = True
        elif self.workload == "code":
            n = self.rng.randint(2, 64)
            line = self.rng.choice(_CODE_LINES).format(name=self.rng.choice(_NAMES), cls=self.rng.choice(_CLASSES), n=n)
            # Tokens keep the spacing before them, so the text reads as code.
            pieces = SPACED_TOKEN_RE.findall(line) or [""]
            self._pending += ["\n" + pieces[0], *pieces[1:]]
        else:
            start = self.rng.randrange(len(_PROSE))
            self._pending += SPACED_TOKEN_RE.findall(" " + " ".join(_PROSE[start : start + self.rng.randint(6, 14)]))

    def next_token(self) -> str | None:
        """The next token's text, or None at end of sequence."""
        while not self._pending and not self.eos:
            self._refill()
        if not self._pending:
            return None
        self.produced += 1
        return self._pending.pop(0)
