"""Inventory problems as an operator reads them: one line each, naming the file, line and field path.

pydantic's ValidationError is translated here (unknown keys get a "did you mean", wrong types say
what was expected and what YAML made of the value); the cross-field rules in `validate.py`
produce the same `Problem`s, so every mistake reads the same way and exits 2.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel

from sparkctl.errors import InputError

PathPart = Union[str, int]
FieldPath = tuple[PathPart, ...]
Locations = dict[FieldPath, tuple[int, int]]  # field path -> (line, column), both 1-based

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def format_path(path: FieldPath) -> str:
    """('hosts', 'worker', 'fabric', 0, 'mtu') -> 'hosts.worker.fabric[0].mtu'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an inventory (or, with severity warning, worth a second look)."""

    path: FieldPath
    message: str
    severity: Literal["error", "warning"] = "error"
    line: Optional[int] = None
    column: Optional[int] = None

    def located(self, locations: Optional[Locations]) -> "Problem":
        """With the line of its field, or of the nearest ancestor written in the file (e.g. for a missing key)."""
        if self.line is not None or not locations:
            return self
        for n in range(len(self.path), -1, -1):
            if self.path[:n] in locations:
                line, column = locations[self.path[:n]]
                return replace(self, line=line, column=column)
        return self

    def render(self, file: Optional[Path | str]) -> str:
        where = str(file) if file is not None else "<inventory>"
        if self.line is not None:
            where += f":{self.line}"
            if not self.path and self.column is not None:
                where += f":{self.column}"
        field = f" {format_path(self.path)}:" if self.path else ""
        return f"{where}:{field} {self.message}"

    def to_dict(self, file: Optional[Path | str]) -> dict:
        return {
            "file": str(file) if file is not None else None,
            "line": self.line,
            "path": format_path(self.path),
            "severity": self.severity,
            "message": self.message,
        }


class InventoryError(InputError):
    """An inventory that cannot be used: every problem, one line each (exit 2)."""

    def __init__(
        self, file: Optional[Path | str], problems: list[Problem], fix: Optional[str] = None, verdict: str = "is invalid"
    ):
        self.file = file
        self.problems = problems
        if len(problems) == 1 and not problems[0].path:
            message = problems[0].render(file)
        else:
            count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
            message = f"inventory {file} {verdict} ({count}):\n" + "\n".join("  " + p.render(file) for p in problems)
        super().__init__(
            message,
            fix=fix or "correct the keys named above; `sparkctl inventory schema` describes every key",
        )

    def to_dict(self) -> dict:
        doc = super().to_dict()
        doc["problems"] = [p.to_dict(self.file) for p in self.problems]
        return doc


# --- pydantic errors -> problems -------------------------------------------------------------


def _yaml_kind(value: Any) -> str:
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the number {value}"
    if isinstance(value, float):
        return f"the number {value:g}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the text {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _unwrap(annotation: Any) -> Any:
    """Optional[X] / Annotated[X, ...] -> X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def annotation_at(root: Any, path: FieldPath) -> Any:
    """The type the model expects at `path` (None when the path leaves the model)."""
    ann: Any = root
    for part in path:
        ann = _unwrap(ann)
        origin = typing.get_origin(ann)
        if _is_model(ann):
            if not isinstance(part, str) or part not in ann.model_fields:
                return None
            ann = ann.model_fields[part].annotation
        elif origin is list and isinstance(part, int):
            ann = typing.get_args(ann)[0]
        elif origin is dict and isinstance(part, str):
            ann = typing.get_args(ann)[1]
        else:
            return None
    return _unwrap(ann)


def _all_field_homes(root: Any) -> dict[str, list[str]]:
    """field name -> the sections (as paths) that have it, for "it belongs in runtime"."""
    homes: dict[str, list[str]] = {}
    seen: set[type] = set()

    def walk(model: Any, where: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            homes.setdefault(name, []).append(where or "(top level)")
            inner = _unwrap(info.annotation)
            origin = typing.get_origin(inner)
            if origin in (list, dict):
                inner = _unwrap(typing.get_args(inner)[-1])
            if _is_model(inner):
                child = f"{where}.{name}" if where else name
                if origin is dict:
                    child += ".<name>"
                elif origin is list:
                    child += "[]"
                walk(inner, child)

    walk(root, "")
    return homes


def did_you_mean(word: str, choices) -> Optional[str]:
    choices = list(choices)
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not match:
        # Typos inside long names (flashinfer_b21x) score low on the whole string: try lower case too.
        lowered = {c.lower(): c for c in choices}
        match = [lowered[m] for m in difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)]
    return match[0] if match else None


def _keys_beside(root: Any, loc: FieldPath) -> list[str]:
    """The keys the mapping holding `loc` may have (none when it is not a model's)."""
    parent = annotation_at(root, loc[:-1])
    return list(parent.model_fields) if _is_model(parent) else []


def _unknown_key(root: Any, loc: FieldPath) -> str:
    key = str(loc[-1])
    fields = _keys_beside(root, loc)
    msg = f"unknown key '{key}'"
    guess = did_you_mean(key, fields)
    if guess:
        return msg + f"; did you mean '{guess}'?"
    homes = _all_field_homes(root).get(key)
    if homes:
        return msg + f" here; it is a key of {' / '.join(homes)}"
    if fields:
        msg += f"; known keys here: {', '.join(fields)}"
    return msg


# pydantic error type -> what the key expects, where saying so is the whole message
_EXPECTED = {
    "list_type": "a list (- item lines or [a, b])",
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "a whole number"),
    **dict.fromkeys(("float_type", "float_parsing"), "a number"),
    "finite_number": "a finite number (not .nan or .inf)",
    "int_parsing_size": "a whole number of a usable size",
    "ip_v4_interface": "an IPv4 address with prefix, e.g. 192.168.200.2/24",
    "path_type": "a file path",
}
_OPERATORS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def _message(root: Any, err: dict) -> str:
    kind = err["type"]
    loc: FieldPath = tuple(err["loc"])
    value = err.get("input")
    got = _yaml_kind(value)
    ctx = err.get("ctx") or {}

    if kind == "extra_forbidden":
        return _unknown_key(root, loc)
    if kind == "missing":
        ann = annotation_at(root, loc)
        parent = annotation_at(root, loc[:-1])
        desc = ""
        if _is_model(parent) and isinstance(loc[-1], str) and loc[-1] in parent.model_fields:
            desc = parent.model_fields[loc[-1]].description or ""
        msg = "required key is missing" + (f": {desc.rstrip('.')}" if desc else "")
        if _is_model(ann):
            required = [n for n, f in ann.model_fields.items() if f.is_required()]
            msg += f" (a mapping with at least: {', '.join(required)})" if required else " (a mapping)"
        return msg
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        ann = annotation_at(root, loc)
        keys = f" with keys {', '.join(ann.model_fields)}" if _is_model(ann) else ""
        return f"expected a mapping{keys}, got {got}"
    if kind == "string_type":
        hint = ""
        if isinstance(value, bool):
            hint = " (YAML reads true/false/yes/no/on/off as booleans: quote it)"
        elif isinstance(value, (int, float)):
            hint = " (quote it to keep it as text)"
        return f"expected text, got {got}{hint}"
    if kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        msg = f"must be one of {', '.join(allowed)}; got {got}"
        guess = did_you_mean(str(value), allowed) if isinstance(value, str) else None
        return msg + (f"; did you mean '{guess}'?" if guess else "")
    if kind in _OPERATORS:
        return f"must be {_OPERATORS[kind]} {next(iter(ctx.values()), '?')}, got {got}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        if loc and loc[-1] == "[key]":
            return f"name {str(value)!r} is not allowed: use letters, digits, '-' and '_' (start with a letter or digit)"
        return f"{got} does not have the required form ({ctx.get('pattern')})"
    if kind == "value_error":
        return str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']}, got {got}"


def from_validation_error(err, root: Any) -> list[Problem]:
    """One Problem per pydantic error, with the field path as the operator wrote it."""
    errs = err.errors(include_url=False)
    # A misspelt required key shows up twice (unknown 'max_num_seq', missing 'max_num_seqs'):
    # the "did you mean" line says it all, so drop the "missing" one.
    covered = {
        tuple(e["loc"][:-1]) + (did_you_mean(str(e["loc"][-1]), _keys_beside(root, tuple(e["loc"]))),)
        for e in errs
        if e["type"] == "extra_forbidden"
    }
    problems = []
    for e in errs:
        loc = tuple(e["loc"])
        if e["type"] == "missing" and loc in covered:
            continue
        message = _message(root, e)
        path = loc[:-1] if loc and loc[-1] == "[key]" else loc
        problems.append(Problem(path, message))
    return problems
