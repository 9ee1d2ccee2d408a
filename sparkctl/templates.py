"""Rendering files from templates/ (jinja2, read from the package data). Pure: same inputs, same text."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _env():
    import jinja2

    from sparkctl.resources import read_text

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: read_text("templates", name)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_template(name: str, **values) -> str:
    return _env().get_template(name).render(**values).rstrip("\n") + "\n"
