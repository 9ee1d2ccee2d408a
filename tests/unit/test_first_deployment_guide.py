"""docs/first-deployment.md: every command block says whether the lab runs it (tests/guide_blocks.py),
so a command added without deciding fails here before tests/lab/test_first_deployment_lab.py runs
the rest on the lab."""

from __future__ import annotations

from pathlib import Path

from guide_blocks import CONTROL, EACH_SPARK, parse

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "first-deployment.md"


def test_every_command_block_of_the_guide_is_marked_and_what_is_not_run_says_why():
    blocks, problems = parse(GUIDE.read_text())
    assert problems == []
    assert {b.where for b in blocks} == {CONTROL, EACH_SPARK, None}
    assert all(b.why_not for b in blocks if b.where is None)
    # what only real hardware can do is not run; the path from the inventory to the token is
    skipped = " ".join(c for b in blocks if b.where is None for c in b.commands)
    assert "pipx install" in skipped
    run = [c.split("#")[0].strip() for b in blocks if b.where == CONTROL for c in b.commands]
    assert {"sparkctl inventory validate", "sparkctl doctor", "sparkctl up --check", "sparkctl up"} <= set(run)
    assert run[-1].startswith("curl -N ")


GUIDE_WITH = """# A guide

<!-- lab: run -->
```sh
sparkctl up
```

{added}
"""


def test_a_command_block_added_without_a_marker_is_named_by_its_line():
    _, problems = parse(GUIDE_WITH.format(added="Then:\n\n```sh\nsudo apt-get install -y rdma-core\n```"))
    assert problems == ["line 10: a command block without a `<!-- lab: ... -->` marker"]


def test_a_marker_must_be_known_and_a_block_not_run_must_say_why():
    _, problems = parse(GUIDE_WITH.format(added="<!-- lab: not run: -->\n```bash\nreboot\n```"))
    assert problems == ["line 9: `lab: not run:` without a reason"]
    _, problems = parse(GUIDE_WITH.format(added="<!-- lab: run twice -->\n```\nsparkctl up\n```"))
    assert problems == ["line 9: unknown marker `lab: run twice` (run | run on each Spark | not run: WHY)"]


def test_a_file_shown_in_a_block_is_not_a_command_and_continuations_are_one_command():
    blocks, problems = parse(
        GUIDE_WITH.format(
            added="```yaml\nkeeper:\n  enabled: true\n```\n\n<!-- lab: run on each Spark -->\n"
            "```sh\n# a comment\ndocker info \\\n  --format x   # why\n\nnvidia-smi -L\n```"
        )
    )
    assert problems == []
    assert [(b.where, b.commands) for b in blocks] == [
        (CONTROL, ("sparkctl up",)),
        (EACH_SPARK, ("docker info --format x   # why", "nvidia-smi -L")),
    ]
