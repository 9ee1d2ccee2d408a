"""Every number in the two shipped example inventories can be traced to the seed text.

The provenance lives here, in tests/unit/recorded/seed_inventories/: a copy of each example in
which a value taken from a seed carries `# seed NNN: "exact words"` (several quotes joined by `+`)
and any other value `# not in seed: why`. Every quote must occur verbatim in the seed file, the
value on the line must appear in its quote (262144 ~ "262K", 2830000 ~ "~2.83M", 4 ~ "four",
327680 ~ "327,680"), and no line with a digit in its value may go unexplained. The shipped
examples (inventories/, what `inventory init` writes) hold the same values in an operator's words:
the hardware and the recipe, never the seeds or the tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO.parent / "shared" / "seeds"  # the seed write-ups live beside a clone, not in it
TRACED = Path(__file__).parent / "recorded" / "seed_inventories"  # the examples with their provenance


@pytest.fixture
def seed_texts():
    """A clone on its own has no seed texts: skip, saying so. CI copies shared/ beside the clone,
    so there a missing folder is a failure, not a skip."""
    if not SEEDS.is_dir():
        why = f"the seed texts are not at {SEEDS} (shared/ beside the clone)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI copies them there, so this must not happen", pytrace=False)
        pytest.skip(why)


SEED_INVENTORIES = {
    "dspark-recipe.yaml": "002",
    "splice-build.yaml": "000",
}

# Keys whose value the seed gives: each must be on a seed-tagged line (so deleting a comment fails).
MUST_BE_TAGGED = {
    "dspark-recipe.yaml": {
        "address",
        "image",
        "model",
        "served_model_name",
        "port",
        "tensor_parallel_size",
        "kv_cache_dtype",
        "block_size",
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_pool_tokens",
        "moe_backend",
        "method",
        "num_speculative_tokens",
        "VLLM_DSPARK_GPU_REJECTED_CONTEXT_MASK",
    },
    "splice-build.yaml": {
        "speed_gbps",
        "count",
        "memory_gib",
        "tensor_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "kv_pool_tokens",
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "size_gib",
        "min_free_gib",
    },
}

TAG = re.compile(r'seed (\d{3}):\s*("[^"]*"(?:\s*\+\s*"[^"]*")*)')
QUOTE = re.compile(r'"([^"]*)"')
NOT_IN_SEED = re.compile(r"not in seed:\s*\S")
LINE = re.compile(r"^\s*(?:-\s+)?(?:(?P<key>[A-Za-z0-9_]+):)?\s*(?P<value>[^#]*?)\s*(?:#\s*(?P<comment>.*))?$")
# A number not inside a version or address (1.2.3, 192.168.1.1), with an optional size word.
NUMBER = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\d.,]\d)(?![\d.])(?:\s*(K|M|k|m|million|thousand)\b)?")
WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}
MULTIPLIERS = {"k": (1000, 1024), "thousand": (1000,), "m": (10**6, 2**20), "million": (10**6,)}


def quote_numbers(text: str) -> list[tuple[float, int, tuple[int, ...]]]:
    """(number, decimals, multipliers) for every number in the text, words included."""
    out = []
    for m in NUMBER.finditer(text):
        digits = m.group(1).replace(",", "")
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        suffix = (m.group(2) or "").lower()
        out.append((float(digits), decimals, MULTIPLIERS.get(suffix, (1,))))
    for word in re.findall(r"[A-Za-z]+", text):
        if word.lower() in WORDS:
            out.append((float(WORDS[word.lower()]), 0, (1,)))
    return out


def number_in(value: float, text: str) -> bool:
    for number, decimals, mults in quote_numbers(text):
        if any(round(value / mult, decimals) == number for mult in mults):
            return True
    return False


def value_in_quotes(raw: str, quotes: list[str]) -> bool:
    value = yaml.safe_load(raw) if raw else None
    joined = " ".join(quotes)
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value):
        value = float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_in(float(value), joined)
    if isinstance(value, str):
        if value.lower() in joined.lower():
            return True
        tokens = [float(m.group(1).replace(",", "")) for m in NUMBER.finditer(value)]
        return bool(tokens) and all(number_in(t, joined) for t in tokens)
    return False


def check_lines(lines: list[str], seed_text: str, seed_id: str) -> tuple[list[str], set[str]]:
    """Problems found, and the keys that are seed-tagged."""
    problems, tagged = [], set()
    for n, line in enumerate(lines, 1):
        m = LINE.match(line)
        key, raw, comment = m.group("key"), m.group("value"), m.group("comment") or ""
        comment_only = line.lstrip().startswith("#")
        tag = TAG.search(line)
        if tag:
            if tag.group(1) != seed_id:
                problems.append(f"line {n}: cites seed {tag.group(1)}, this inventory is seed {seed_id}")
            quotes = QUOTE.findall(tag.group(2))
            for q in quotes:
                if q not in seed_text:
                    problems.append(f"line {n}: quote not in seed {seed_id} verbatim: {q!r}")
            if not comment_only and raw:
                if not value_in_quotes(raw, quotes):
                    problems.append(f"line {n}: value {raw!r} does not appear in its quote(s) {quotes}")
                tagged.add(key or raw)
        if comment_only or not raw:
            continue
        if re.search(r"\d", raw) and not tag and not NOT_IN_SEED.search(comment):
            problems.append(f"line {n}: {line.strip()!r} has a number but neither a seed quote nor 'not in seed: why'")
    return problems, tagged


@pytest.mark.parametrize("name", sorted(SEED_INVENTORIES))
def test_every_seed_number_is_traceable(name, seed_texts):
    seed_id = SEED_INVENTORIES[name]
    (seed_file,) = SEEDS.glob(f"{seed_id}_*.txt")
    seed_text = seed_file.read_text(encoding="utf-8")
    lines = (TRACED / name).read_text(encoding="utf-8").splitlines()

    problems, tagged = check_lines(lines, seed_text, seed_id)

    assert not problems, "\n".join(problems)
    missing = MUST_BE_TAGGED[name] - tagged
    assert not missing, f"{name}: these keys take their value from the seed but carry no seed quote: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(SEED_INVENTORIES))
def test_the_shipped_example_holds_the_traced_values_in_an_operators_words(name):
    shipped = (REPO / "inventories" / name).read_text(encoding="utf-8")
    assert yaml.safe_load(shipped) == yaml.safe_load((TRACED / name).read_text(encoding="utf-8"))
    developer = re.findall(r"(?i)\bseeds?\b|shared/|tests/|reference/|not in seed", shipped)
    assert not developer, f"inventories/{name} speaks of {sorted(set(developer))}: operators read it (`inventory init`)"


# The checker itself must be able to fail.
SEED = "KV cache: nvfp4_ds_mla, 256-block size. Context: 262K max_model_len. Pool ~2.83M tokens. at most four streams."


@pytest.mark.parametrize(
    "line",
    [
        'block_size: 256  # seed 002: "256-block size"',
        'max_model_len: 262144  # seed 002: "262K max_model_len"',
        'kv_pool_tokens: 2830000  # seed 002: "Pool ~2.83M tokens"',
        'max_num_seqs: 4  # seed 002: "at most four streams"',
        'kv_cache_dtype: nvfp4_ds_mla  # seed 002: "KV cache: nvfp4_ds_mla"',
        "port: 8000  # not in seed: vLLM default",
    ],
)
def test_checker_accepts_traceable_lines(line):
    assert check_lines([line], SEED, "002")[0] == []


@pytest.mark.parametrize(
    "line, complaint",
    [
        ('block_size: 128  # seed 002: "256-block size"', "does not appear"),
        ('block_size: 256  # seed 002: "256 block size"', "not in seed 002 verbatim"),
        ('max_model_len: 300000  # seed 002: "262K max_model_len"', "does not appear"),
        ("max_num_seqs: 4", "neither a seed quote"),
        ('max_num_seqs: 4  # seed 000: "at most four streams"', "cites seed 000"),
        ('kv_cache_dtype: fp8  # seed 002: "KV cache: nvfp4_ds_mla"', "does not appear"),
    ],
)
def test_checker_rejects_untraceable_lines(line, complaint):
    problems = check_lines([line], SEED, "002")[0]
    assert problems and complaint in problems[0]
