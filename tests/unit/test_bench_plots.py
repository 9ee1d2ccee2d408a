"""`sparkctl bench report`: figures built from recorded lab results plot exactly the results' numbers,
and the HTML page opens offline (no external URL, plots embedded).

The recorded files are real `sparkctl bench -i <lab inventory>` runs (--repeats 1 and --repeats 3)
against the lab's simulator runtime.
"""

from __future__ import annotations

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import clirun
import pytest

from sparkctl.bench.compare import load
from sparkctl.bench.html import labels_for, render_html
from sparkctl.bench.plots import Labeled, acceptance_context, latency, mixed_timeline, throughput

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "unit" / "recorded" / "bench"
ONE, THREE = RECORDED / "lab-repeats1.json", RECORDED / "lab-repeats3.json"


@pytest.fixture(scope="module")
def runs() -> list[Labeled]:
    return [Labeled(label, load(p)) for label, p in zip(labels_for([ONE, THREE]), [ONE, THREE])]


def _axis_label_texts(fig) -> list[str]:
    return [t for ax in fig.axes for t in (ax.get_xlabel(), ax.get_ylabel())]


def test_throughput_bars_are_each_cells_output_throughput(runs):
    plot = throughput(runs)
    ax = plot.figure.axes[0]
    assert len(ax.containers) == 2  # one bar series per result file
    cells = [(w, s) for w, s in ((c.workload, c.streams) for c in runs[0].result.throughput)]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{w}\n{s} stream{'s' if s > 1 else ''}" for w, s in cells]
    for run, bars in zip(runs, ax.containers):
        assert bars.get_label() == run.label
        assert [b.get_height() for b in bars] == [run.result.cell(w, s).output_throughput for w, s in cells]
    assert "tokens/s" in ax.get_ylabel()


def test_acceptance_lines_are_the_context_points(runs):
    plot = acceptance_context(runs)
    length_ax, rate_ax, decode_ax = plot.figure.axes
    for ax, field in (
        (length_ax, "spec_decode_acceptance_length"),
        (rate_ax, "spec_decode_acceptance_rate"),
        (decode_ax, "decode_throughput"),
    ):
        assert [line.get_label() for line in ax.lines] == [r.label for r in runs]
        for run, line in zip(runs, ax.lines):
            pts = run.result.context
            assert list(line.get_xdata()) == [p.prompt_tokens for p in pts]
            assert list(line.get_ydata()) == [getattr(p, field) for p in pts]
    # the seed's curve: acceptance falls as context grows (the sim models seed 002's fall)
    ys = list(length_ax.lines[0].get_ydata())
    assert ys == sorted(ys, reverse=True) and ys[0] > 4 and ys[-1] < 3
    assert "tokens per step" in length_ax.get_ylabel() and "%" in rate_ax.get_ylabel()
    assert all("tokens" in ax.get_xlabel() for ax in plot.figure.axes)


def test_latency_dots_are_every_requests_record_and_ticks_the_cell_medians(runs):
    plot = latency(runs)
    ttft_ax, itl_ax = plot.figure.axes
    for ax, field, summary in ((ttft_ax, "ttft_ms", "median_ttft_ms"), (itl_ax, "mean_itl_ms", "median_itl_ms")):
        dots, medians = ax.collections[0::2], ax.collections[1::2]
        for run, d, m in zip(runs, dots, medians):
            recorded = [getattr(q, field) for c in run.result.throughput for rep in c.repeats for q in rep.requests]
            assert [y for _, y in d.get_offsets()] == recorded
            assert [y for _, y in m.get_offsets()] == [getattr(c, summary) for c in run.result.throughput]
        assert "(ms)" in ax.get_ylabel()
    # --repeats 3 at 4 streams: 12 dots in that cell, 4 with --repeats 1
    assert len(ttft_ax.collections[2].get_offsets()) == 3 * len(ttft_ax.collections[0].get_offsets())


def test_mixed_timeline_is_the_recorded_times(runs):
    plot = mixed_timeline(runs)
    for ax, run in zip(plot.figure.axes, runs):
        m = run.result.mixed
        long, short = m.requests
        parts = {c.get_gid(): c.get_paths()[0].get_extents() for c in ax.collections}
        # the long request waits from its send to its first token, the short one from its send to its own
        assert (parts["long-wait"].x0, parts["long-wait"].x1) == pytest.approx((0.0, m.long_ttft_ms))
        assert (parts["short-wait"].x0, parts["short-wait"].x1) == pytest.approx(
            (m.short_sent_after_ms, m.short_sent_after_ms + m.short_ttft_ms)
        )
        lines = {line.get_gid(): line.get_xdata() for line in ax.lines}
        assert list(lines["long-admitted"])[0] == m.long_admitted_after_ms
        assert list(lines["long-done"]) == [long.e2el_ms]
        assert list(lines["short-done"]) == [m.short_sent_after_ms + short.e2el_ms]
        assert "ms" in ax.get_xlabel()


def test_every_axis_is_labelled(runs):
    for make in (throughput, acceptance_context, latency, mixed_timeline):
        labels = _axis_label_texts(make(runs).figure)
        assert all(labels), f"{make.__name__}: an axis has no label"


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.imgs: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "action", "data", "poster", "srcset"):
                self.refs.append(value or "")
        if tag == "img":
            self.imgs.append(dict(attrs)["src"])
        if tag in ("script", "link", "iframe", "object"):
            self.refs.append(f"<{tag}>")


def test_html_opens_offline_with_the_plots_embedded(runs):
    html = render_html(runs)
    refs = _Refs()
    refs.feed(html)
    assert refs.imgs and all(src.startswith("data:image/png;base64,") for src in refs.imgs)
    assert all(r.startswith("data:") for r in refs.refs), [r[:60] for r in refs.refs if not r.startswith("data:")]
    assert not re.search(r"url\(|@import", html)
    for src in refs.imgs:
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG")
    # the page carries the numbers a person compares: the seed's table from each result
    for run in runs:
        assert f"{run.result.cell('code', 4).output_throughput:,.1f} tokens/s" in html


def test_cli_report_writes_page_and_pngs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    p = clirun.sparkctl(
        ["bench", "report", str(ONE), str(THREE), "--out", str(tmp_path / "rep"), "--json"], env=env, cwd=ROOT, timeout=120
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert Path(doc["report"]).name == "report.html"
    assert sorted(Path(x).name for x in doc["plots"]) == sorted(
        ["throughput.png", "acceptance-context.png", "latency.png", "mixed-timeline.png"]
    )
    for x in doc["plots"]:
        assert Path(x).read_bytes().startswith(b"\x89PNG")


def test_cli_report_bad_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "something-else"}')
    env = {k: v for k, v in os.environ.items() if k != "SPARKCTL_INVENTORY"}
    p = clirun.sparkctl(["bench", "report", str(bad), "--out", str(tmp_path)], env=env, cwd=ROOT, timeout=60)
    assert p.returncode == 2
    assert "bad.json is not a sparkctl bench result" in p.stderr and "Traceback" not in p.stderr
