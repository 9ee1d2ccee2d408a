"""The example inventories sparkctl ships (inventories/ in a checkout, package data in a wheel),
which `sparkctl inventory init --from NAME` copies for an operator to edit."""

from __future__ import annotations

# name for --from -> (file in inventories/, what it describes)
EXAMPLES = {
    "dspark": ("dspark-recipe.yaml", "two DGX Sparks, TP=2 over RoCE, DSpark speculative decoding (seed 002)"),
    "splice": ("splice-build.yaml", "two DGX Sparks plus an x86 offload host: drafter and Engram in RAM (seed 000)"),
    "lab": ("lab.yaml", "the simulated three-host lab on this machine (`sparkctl lab up`, from a checkout)"),
}

CHOICES = "|".join(EXAMPLES)
# the hint error messages give wherever an operator needs an inventory to start from
START_HINT = f"start from a shipped example: `sparkctl inventory init --from {CHOICES}` (or `sparkctl inventory schema`)"


def text(name: str) -> str:
    """The example's YAML, as shipped. KeyError for an unknown name."""
    from sparkctl.resources import read_text

    found = read_text("inventories", EXAMPLES[name][0])
    if found is None:  # a broken install: the wheel must carry them (tests/unit/test_wheel.py)
        raise FileNotFoundError(f"sparkctl's package data has no inventories/{EXAMPLES[name][0]}")
    return found
