"""`sparkctl bench report`: one self-contained HTML page (plots embedded as data: URIs, inline CSS,
no script, no external URL, so it opens offline and can be mailed) and the same plots as PNG files.
"""

from __future__ import annotations

import base64
from pathlib import Path

from sparkctl.bench.plots import Labeled, figures
from sparkctl.bench.report import fmt, seed_rows, summary_lines
from sparkctl.errors import InputError

REPORT_NAME = "report.html"

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sparkctl bench report: {{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 1.5em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; } .notes { color: #555; font-size: 0.9em; } code { background: #f3f3f3; }
</style>
</head>
<body>
<h1>sparkctl bench report: {{ title }}</h1>
<table>
<tr><th>result</th><th>model</th><th>endpoint</th><th>server</th><th>started (UTC)</th><th>run</th><th>sparkctl</th></tr>
{% for r in runs %}<tr><td>{{ r.label }}</td><td>{{ r.result.model }}</td><td><code>{{ r.result.endpoint }}</code></td>
<td>{{ r.result.server.version or "-" }}</td><td>{{ r.result.started_at.strftime("%Y-%m-%d %H:%M:%S") }}</td>
<td class="n">{{ r.duration }}</td><td>{{ r.result.sparkctl_version }}</td></tr>
{% endfor %}</table>
{% for r in runs %}{% if r.result.throughput %}{% set header, rows = r.table %}
<h2>{{ r.label }}: median aggregate output tok/s</h2>
<table>
<tr><th>Workload</th>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr><td>{{ row[0] }}</td>{% for v in row[1:] %}<td class="n">{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endif %}
{% if r.lines %}<ul>{% for label, text in r.lines %}<li><b>{{ label }}</b> {{ text }}</li>{% endfor %}</ul>{% endif %}
{% if r.result.notes %}<ul class="notes">{% for n in r.result.notes %}<li>note: {{ n }}</li>{% endfor %}</ul>{% endif %}
{% endfor %}
{% for p in plots %}
<h2>{{ p.title }}</h2>
<figure><img alt="{{ p.title }}" src="data:image/png;base64,{{ p.data }}"><figcaption>{{ p.caption }}</figcaption></figure>
{% endfor %}
</body>
</html>
"""


def labels_for(paths: list[Path]) -> list[str]:
    """Each result's name in the figures: its file name, with the folder when two names clash."""
    stems = [p.stem for p in paths]
    return [p.stem if stems.count(p.stem) == 1 else str(p.with_suffix("")) for p in paths]


def render_html(runs: list[Labeled], plots=None) -> str:
    import jinja2

    plots = figures(runs) if plots is None else plots
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(TEMPLATE).render(
        title=", ".join(r.label for r in runs),
        runs=[
            {
                "label": r.label,
                "result": r.result,
                "duration": fmt(r.result.duration, "s"),
                "table": seed_rows(r.result),
                "lines": summary_lines(r.result),
            }
            for r in runs
        ],
        plots=[{"title": p.title, "caption": p.caption, "data": base64.b64encode(p.png).decode("ascii")} for p in plots],
    )


def write_report(runs: list[Labeled], out_dir: Path) -> list[Path]:
    """DIR/report.html and DIR/<figure>.png; returns the files written (the page first)."""
    plots = figures(runs)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written = [out_dir / REPORT_NAME]
        written[0].write_text(render_html(runs, plots))
        for p in plots:
            path = out_dir / f"{p.name}.png"
            path.write_bytes(p.png)
            written.append(path)
    except OSError as err:
        raise InputError(
            f"cannot write the report to {out_dir}: {err.strerror}", fix="pass --out (or --report) a writable folder"
        ) from err
    return written
