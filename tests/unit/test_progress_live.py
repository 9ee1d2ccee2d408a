"""The live report of `up`/`down`: per-host lines that are never stale, finished lines that fit the
terminal (cut at a word, never wrapped), and full plain lines off a terminal.

Driven through the runner's two callbacks only, with real StepResults, printed on a rich console
as a terminal of 80 columns (or as a pipe).
"""

from __future__ import annotations

import io
import re

from rich.console import Console

from sparkctl.cli.steps_output import LiveReport, shorten
from sparkctl.steps.base import StepResult
from sparkctl.steps.transfer import Transfer

LONG = (
    "image ID matches on every node: 10.231.0.1:5000/sparkctl/vllm-sim:0.1 present as "
    "sha256:4f2a9c0e1b7d on head, worker and offload, nothing to pull"
)
FIX = (
    "free the GPU on spark-b: stop the process that holds it (nvidia-smi lists it) or pass --ignore "
    "gpu.free when you know it is harmless"
)


def _console(terminal: bool, width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=width, color_system=None, highlight=False), out


def _screen_lines(out: io.StringIO) -> list[str]:
    """What was written, as lines: the live block's cursor moves and erases removed."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if line]


def _block(report: LiveReport, console: Console) -> list[str]:
    """The live block as the terminal shows it now."""
    with console.capture() as cap:
        console.print(report)
    return cap.get().rstrip("\n").split("\n")


def test_shorten_cuts_at_a_word():
    assert shorten(LONG, 40) == "image ID matches on every node: …"
    assert shorten("short", 40) == "short"
    assert shorten("x" * 50, 10) == "x" * 9 + "…"
    for width in range(10, 90):
        assert len(shorten(LONG, width)) <= width


def test_terminal_lines_fit_and_break_at_words():
    console, out = _console(terminal=True)
    with LiveReport(quiet=False, console=console) as live:
        live.result(StepResult("images", "head", "ok", LONG))
        live.result(StepResult("preflight", "spark-b", "failed", "gpu.free: GPU 0 is used by process 4242 (python)", fix=FIX))
    lines = _screen_lines(out)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    # the finished line (the live block, refreshed on its own clock, may show the host's line first)
    first = next(line for line in lines if line.split()[:3] == ["ok", "head", "images"])
    assert first.endswith(" …")
    kept = first.split("images", 1)[1].removesuffix(" …").split()
    assert kept == LONG.split()[: len(kept)]  # whole words, in order: cut at a word, not wrapped mid-word
    # the fix is never cut: every word of it is on screen, wrapped at words under the message
    fix_lines = [line.strip() for line in lines if line.startswith(" " * 17)]
    assert " ".join(fix_lines).removeprefix("fix: ").split() == FIX.split()


def test_off_a_terminal_every_word_stays():
    console, out = _console(terminal=False)
    with LiveReport(quiet=False, console=console) as live:
        live.progress("head", "runtime", "starting sparkctl-head")
        live.result(StepResult("images", "head", "ok", LONG))
        live.result(StepResult("preflight", "spark-b", "failed", "gpu busy", fix=FIX))
    text = out.getvalue()
    assert " ".join(text.split()).count(LONG) == 1
    assert FIX in " ".join(text.split())
    assert "starting sparkctl-head" not in text  # no live block, no spinner frames in logs
    assert text.splitlines()[0] == f"     ok head      images   {LONG}"


def test_live_block_one_line_per_host_never_stale():
    console, _ = _console(terminal=True)
    report = LiveReport(quiet=False, hosts=["head", "worker", "offload"], console=console)
    block = _block(report, console)
    assert "gathering facts from every host" in block[0]

    report.progress("all", "preflight", "checking before the first change")
    assert any("all" in line and "checking before the first change" in line for line in _block(report, console))
    for h in ("head", "worker", "offload"):
        report.result(StepResult("preflight", h, "ok", "5 blocking check(s) ok"))
    report.progress("head", "images", "pull 10.231.0.1:5000/sparkctl/vllm-sim:0.1")
    report.progress("worker", "images", "side-load from head")
    block = _block(report, console)
    assert not any("checking before the first change" in line for line in block)  # the gate is over
    assert len(block) == 3  # one line per host
    head, worker, offload = block
    assert head.split()[1:3] == ["head", "images"] and "pull 10.231.0.1" in head
    assert worker.split()[1:3] == ["worker", "images"] and "side-load from head" in worker
    assert offload.split()[1:4] == ["offload", "preflight", "ok"]

    report.progress("head", "images", "pulled 3 of 5 layers")
    assert "pulled 3 of 5 layers" in _block(report, console)[0] and "pull 10.231" not in _block(report, console)[0]
    report.result(StepResult("images", "head", "changed", "pulled " + LONG))
    report.result(StepResult("runtime", "worker", "failed", "sparkctl-worker exited (code 1)"))
    report.result(StepResult("record", "worker", "skipped", "not run: step 'runtime' failed"))
    head, worker, _ = _block(report, console)
    assert head.split()[:4] == ["✓", "head", "images", "changed"]
    # a skip after the failure does not hide the step that failed
    assert worker.split()[:4] == ["✗", "worker", "runtime", "failed"]
    assert all(len(line) <= 80 for line in _block(report, console))


def test_a_cluster_phase_gives_way_to_the_next_step():
    console, _ = _console(terminal=True)
    report = LiveReport(quiet=False, console=console)
    report.progress("all", "preflight", "checking before the first change")
    report.progress("head", "runtime", "waiting for health")
    block = _block(report, console)
    assert not any("checking before the first change" in line for line in block)
    assert block[0].split()[1:3] == ["head", "runtime"]


def test_quiet_prints_nothing():
    console, out = _console(terminal=True)
    with LiveReport(quiet=True, console=console) as live:
        live.progress("head", "runtime", "starting")
        live.result(StepResult("images", "head", "ok", LONG))
    assert out.getvalue() == ""


def test_verbose_keeps_every_word_wrapped_at_words():
    console, out = _console(terminal=True)
    with LiveReport(quiet=False, console=console, verbose=True) as live:
        live.result(StepResult("images", "head", "changed", LONG, changes=[LONG, "second change"]))
    lines = [line for line in _screen_lines(out) if not line.startswith(("⠋", "·", "✓"))]
    assert all(len(line) <= 80 for line in lines)
    first = lines.index(next(line for line in lines if line.lstrip().startswith("changed head")))
    message = []
    for line in lines[first:]:
        if line.startswith(" " * 17 + "- "):
            break
        message += line.split()
    assert message[3:] == LONG.split()  # after "changed head images": every word, none cut


def test_answer_to_a_file_while_the_live_block_is_on_the_terminal():
    # `sparkctl up > plan.txt` at a terminal: the finished lines (the answer) reach the file whole,
    # the live block (progress) stays on the terminal's stderr and never reaches the file
    answer, file = _console(terminal=False)
    terminal, screen = _console(terminal=True)
    with LiveReport(quiet=False, hosts=["head"], console=answer, live_console=terminal) as live:
        live.progress("head", "runtime", "starting sparkctl-head")
        live.result(StepResult("images", "head", "ok", LONG))
    assert file.getvalue().splitlines() == [f"     ok head      images   {LONG}"]
    assert any("starting sparkctl-head" in line or "images" in line for line in _screen_lines(screen))
    assert LONG not in screen.getvalue()  # the whole line went to the answer, not the terminal


# the weights' copy as steps/weights.py reports it: 60 of 192 MB at the lab rail's 118 MB/s
COPY = Transfer("copying from head over enp1s0f0np0", 60_000_000, 192_000_000, 118e6)


def test_a_transfer_is_a_bar_with_its_bytes_rate_and_time_left_within_the_terminal():
    for width in (60, 80, 120):
        console, _ = _console(terminal=True, width=width)
        report = LiveReport(quiet=False, hosts=["head", "worker"], console=console)
        report.progress("head", "weights", "verifying 6 file(s), 0.19 GB")
        report.progress("worker", "weights", COPY)
        head, worker = (line.rstrip() for line in _block(report, console))  # (what pads the right edge varies by rich)
        assert worker.split()[1:4] == ["worker", "weights", "0s"] and " copying " in worker, worker
        # bytes and time left always; the rate where there is room
        assert worker.endswith("0.06/0.19 GB, 118 MB/s, 1 s left" if width >= 80 else "0.06/0.19 GB, 1 s left"), worker
        assert "━" in worker  # the bar
        assert len(worker) <= width and len(head) <= width, (width, worker)
        # the next reading replaces it; the transfer's end gives way to the step's next phase
        report.progress("worker", "weights", Transfer(COPY.doing, 192_000_000, 192_000_000, 118e6))
        assert _block(report, console)[1].rstrip().endswith("0.19/0.19 GB" + (", 118 MB/s" if width >= 80 else ""))
        report.progress("worker", "weights", "verifying 6 file(s), 0.19 GB")
        assert "━" not in _block(report, console)[1]


def test_off_a_terminal_each_transfer_reading_is_a_line_on_stderr_and_the_answer_stays_whole():
    answer, stdout = _console(terminal=False)
    log, stderr = _console(terminal=False)
    with LiveReport(quiet=False, hosts=["worker"], console=answer, live_console=log) as live:
        live.progress("worker", "weights", "verifying 6 file(s)")  # a phase: no line in a log
        live.progress("worker", "weights", Transfer(COPY.doing, 0, 192_000_000))
        live.progress("worker", "weights", COPY)
        live.result(StepResult("weights", "worker", "changed", "copied 6 file(s), 0.19 GB from head"))
    assert stderr.getvalue().splitlines() == [
        f"worker weights: {COPY.doing}: 0.00 GB of 0.19 GB",
        f"worker weights: {COPY.doing}: 0.06 GB of 0.19 GB, 118 MB/s, 1 s left",
    ]
    assert stdout.getvalue().splitlines() == ["changed worker    weights  copied 6 file(s), 0.19 GB from head"]
