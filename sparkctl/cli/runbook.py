"""`sparkctl runbook [NAME]`: print a runbook (docs/runbooks/, shipped in the package), or list them."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sparkctl.cli.options import JsonOpt


def runbook(
    name: Annotated[
        Optional[str],
        typer.Argument(
            help="Runbook (fabric.mtu, kv-cache-full, ...) or the doctor check that names it; none: list them.",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print a runbook: what you see, confirm, fix, verify, escalate.

    The one doctor and the alerts link to, from the installed package (no checkout needed).
    Rendered for a terminal; the Markdown as written into a pipe or a file. Without NAME: every
    runbook, one line each.

    Examples:
      # every runbook, one line each
      sparkctl runbook
      # one, by its name or the doctor check that links it
      sparkctl runbook fabric.mtu
      # its Markdown source, into a file
      sparkctl runbook fabric.mtu > fabric.mtu.md
    """
    import sys

    from sparkctl import runbooks
    from sparkctl.cli.output import print_json
    from sparkctl.errors import InputError

    if name is None:
        listing = [{"name": n, "title": runbooks.title(n)} for n in runbooks.all_names()]
        if json_out:
            print_json({"runbooks": listing})
        else:
            width = max(len(r["name"]) for r in listing)
            sys.stdout.write("".join(f"{r['name']:<{width}}  {r['title']}\n" for r in listing))
        return
    found = runbooks.resolve(name)
    if found is None:
        import difflib

        names = runbooks.all_names()
        close = difflib.get_close_matches(runbooks.name_of(name), names, n=3)
        raise InputError(
            f"no runbook named {name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""),
            fix=f"name one of: {', '.join(names)} (`sparkctl runbook` lists them with their titles)",
        )
    if json_out:
        print_json({"name": found, "title": runbooks.title(found), "text": runbooks.text(found)})
        return
    from sparkctl.cli.output import answer

    console = answer()
    if not console.is_terminal:  # `sparkctl runbook NAME > file.md` keeps the Markdown source
        sys.stdout.write(runbooks.text(found))
        return
    from rich.markdown import Markdown  # here only: the other commands never load the Markdown renderer

    # the source is hard-wrapped near 100 columns: rendered, it reflows to the terminal's width
    console.print(Markdown(runbooks.text(found), hyperlinks=False))
