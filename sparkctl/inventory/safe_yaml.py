"""YAML from an untrusted file, as plain data: no objects, no alias bombs, no silent duplicates.

On top of PyYAML's SafeLoader (which never imports or calls anything) this loader:
- refuses every tag but plain scalars, lists and mappings (`!!python/...`, `!!binary`, `!!set`,
  custom `!tags`), with the line they are on, before anything is constructed;
- measures the document as it would be once aliases are expanded, and refuses it above
  MAX_NODES nodes or MAX_DEPTH levels (billion laughs: ten aliases of ten aliases ... is a few
  hundred bytes of YAML and 10^9 nodes for whatever walks it next), and refuses recursive aliases;
- stops composing past MAX_DEPTH, so `[[[[...` cannot exhaust the Python stack;
- refuses a key written twice in one mapping (YAML would silently keep the last one);
- keeps dates as text (an image tag or a name that looks like a date is not a datetime);
- records where each key and list item is, so errors can name the line.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_NODES = 20_000  # an inventory has a few hundred
MAX_DEPTH = 32  # an inventory nests six levels

_STD = "tag:yaml.org,2002:"
ALLOWED_TAGS = {_STD + t for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge", "timestamp")}


class YamlProblem(Exception):
    """The text is not an acceptable YAML inventory; line and column are 1-based when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_STD) :] if tag.startswith(_STD) else tag


class _Loader(yaml.SafeLoader):
    """SafeLoader with a nesting limit while composing and a duplicate-key check while constructing."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML's hook
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > MAX_NODES:  # stop reading a huge document early, not after composing it all
                mark = self.peek_event().start_mark
                raise YamlProblem(f"more than {MAX_NODES} values; an inventory has a few hundred", mark.line + 1, mark.column + 1)
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlProblem(
                    f"nested deeper than {MAX_DEPTH} levels; an inventory needs a handful", mark.line + 1, mark.column + 1
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[str, Any] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == _STD + "merge":
                    continue
                first = seen.get(key_node.value)
                if first is not None:
                    mark = key_node.start_mark
                    raise YamlProblem(
                        f"key '{key_node.value}' is written twice in the same mapping (first on line "
                        f"{first.line + 1}); YAML would silently keep only the last one",
                        mark.line + 1,
                        mark.column + 1,
                    )
                seen[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep)

    def construct_yaml_timestamp(self, node):  # dates stay text
        return self.construct_scalar(node)


_Loader.add_constructor(_STD + "timestamp", _Loader.construct_yaml_timestamp)


def _check_graph(root: Node) -> None:
    """Tags, recursion, expanded size and depth: one pass over the distinct nodes (aliases shared)."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    active: set[int] = set()

    def visit(node: Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        mark = node.start_mark
        if key in active:
            raise YamlProblem("an alias refers to a node that contains it (recursive alias)", mark.line + 1, mark.column + 1)
        if node.tag not in ALLOWED_TAGS:
            raise YamlProblem(
                f"YAML tag {_short_tag(node.tag)} is not allowed: an inventory is plain data (text, numbers, "
                "lists, mappings) and tags never construct objects",
                mark.line + 1,
                mark.column + 1,
            )
        active.add(key)
        count, depth = 1, 1
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            c, d = visit(child)
            count += c
            depth = max(depth, d + 1)
            if count > MAX_NODES:
                raise YamlProblem(
                    f"the document expands to more than {MAX_NODES} nodes once its aliases are expanded "
                    "(an alias bomb?); an inventory has a few hundred",
                    mark.line + 1,
                    mark.column + 1,
                )
            if depth > MAX_DEPTH:
                raise YamlProblem(f"aliases nest the document deeper than {MAX_DEPTH} levels", mark.line + 1, mark.column + 1)
        active.discard(key)
        sizes[key] = (count, depth)
        return count, depth

    visit(root)


def _index(node: Node, path: tuple, out: dict) -> None:
    """Record (line, column) of every mapping key and list item under `path`."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:  # already flattened (<<) by construction
            if isinstance(key_node, ScalarNode):
                key: Any = key_node.value
                sub = path + (key,)
                out[sub] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                _index(value_node, sub, out)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            sub = path + (i,)
            out[sub] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _index(item, sub, out)


def _reader_message(text: str, err) -> str:
    line = text.count("\n", 0, err.position) + 1
    return f"line {line}: control character #x{err.character:04x} is not allowed in YAML text"


def parse(text: str) -> tuple[Any, dict]:
    """Parse one YAML document into plain data plus {field path: (line, column)}.

    Raises YamlProblem for syntax errors, refused tags, alias bombs, deep nesting and duplicate keys.
    """
    loader = None
    try:
        loader = _Loader(text)  # PyYAML's reader refuses control characters right here (or later on)
        root = loader.get_single_node()
        if root is None:
            return None, {}
        _check_graph(root)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = err.problem or err.context or "invalid YAML"
        if err.context and err.problem and err.context_mark and err.context_mark is not mark:
            what = f"{err.problem} ({err.context} on line {err.context_mark.line + 1})"
        raise YamlProblem(f"YAML syntax: {what}", mark.line + 1 if mark else None, mark.column + 1 if mark else None) from None
    except yaml.reader.ReaderError as err:
        raise YamlProblem(_reader_message(text, err)) from None
    except yaml.YAMLError as err:
        raise YamlProblem(f"YAML syntax: {err}") from None
    except RecursionError:
        raise YamlProblem(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        if loader is not None:
            loader.dispose()
    locations: dict = {}
    _index(root, (), locations)
    return data, locations
