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
COUNT_RE = re.compile(r"\bcount(?:ing)?\b[^0-9]{0,40}?(?:from\s+)?(-?\d+)\s*(?:to|through|until|-)\s*(-?\d+)", re.I)
CODE_HINT_RE = re.compile(
    r"```|\bdef\s+\w+\(|\bclass\s+\w+|#include|\bfunction\b|\breturn\b|\bimport\s+\w+|=>|;\s*$|\{\s*$|"
    r"\b(?:python|javascript|typescript|rust|golang|java|c\+\+|bash|sql|code|program|script|implement|refactor|"
    r"function|algorithm|regex|compile|unit test|api)\b",
    re.I | re.M,
)

BOS = "<｜begin▁of▁sentence｜>"


def tokenize(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    return sum(1 for _ in TOKEN_RE.finditer(text))


def token_ids(text: str) -> list[int]:
    """Stable ids for prefix caching (the same text gives the same ids in every process)."""
    return [zlib.crc32(t.encode("utf-8")) for t in TOKEN_RE.findall(text)]


def render_chat(messages: list[dict], enable_thinking: bool = True, add_generation_prompt: bool = True) -> str:
    """DeepSeek's chat template, reduced to the shape that matters for token counts."""
    parts = [BOS]
    for m in messages:
        role = m.get("role", "user")
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        content = content or ""
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
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content", "")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            return c or ""
    return ""


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
    "    \"\"\"Return the first {n} items that pass the check.\"\"\"",
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
        self._count_next = 1
        self._count_end: int | None = None
        self._count_step = 1
        self._started = False
        if workload == "counting":
            m = COUNT_RE.search(prompt_text)
            if m:
                a, b = int(m.group(1)), int(m.group(2))
                self._count_next, self._count_end = a, b
                self._count_step = 1 if b >= a else -1
            else:
                self._count_next, self._count_end = 1, 1000
        # A natural answer length for code/prose (long enough for 400-token benchmarks).
        self.natural_len = self.rng.randint(900, 2200)
        self.produced = 0

    def _refill(self) -> None:
        if self.workload == "counting":
            step = self._count_step
            if not self.ignore_eos and self._count_end is not None and self._started and (
                (step > 0 and self._count_next > self._count_end) or (step < 0 and self._count_next < self._count_end)
            ):
                self.eos = True
                return
            lead = "" if not self._started else ","
            if lead:
                self._pending.append(lead)
            self._pending.append(("" if not self._started else " ") + str(self._count_next))
            self._started = True
            self._count_next += step
        elif self.workload == "code":
            if not self.ignore_eos and self.produced >= self.natural_len:
                self.eos = True
                return
            n = self.rng.randint(2, 64)
            line = self.rng.choice(_CODE_LINES).format(name=self.rng.choice(_NAMES), cls=self.rng.choice(_CLASSES), n=n)
            toks = tokenize(line)
            # Re-attach the spacing the tokenizer dropped, so the text reads as code.
            pos = 0
            pieces = []
            for t in toks:
                idx = line.find(t, pos)
                pieces.append(line[pos:idx] + t)
                pos = idx + len(t)
            if pieces:
                pieces[0] = "\n" + pieces[0]
            else:
                pieces = ["\n"]
            self._pending.extend(pieces)
        else:
            if not self.ignore_eos and self.produced >= self.natural_len:
                self.eos = True
                return
            start = self.rng.randrange(len(_PROSE))
            for w in _PROSE[start:start + self.rng.randint(6, 14)]:
                for i, t in enumerate(tokenize(w)):
                    self._pending.append((" " if i == 0 else "") + t)

    def next_token(self) -> str | None:
        """The next token's text, or None at end of sequence."""
        while not self._pending and not self.eos:
            self._refill()
        if not self._pending:
            return None
        self.produced += 1
        return self._pending.pop(0)
