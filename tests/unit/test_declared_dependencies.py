"""What sparkctl and sparkctl-lab import, their pyproject.toml declares: `pip install -e . -e ./lab`
then `sparkctl lab up` cannot fail on a module that only happened to be installed beside them.

Every import statement that can run is read with `ast` (module level and inside functions); one in a
`try` that catches ImportError is optional (it has a fallback) and need not be declared. A module is
named by the distribution that installs it here (importlib.metadata), so `yaml` is PyYAML."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Imported by sparkctl without a declaration of its own: each is the API of a declared library,
# whose own requirement brings it (declaring it would pin a second floor on one dependency)
VIA = {
    "requests": "docker",  # transport/failures.py: docker-py's errors are requests' exceptions
    "yarl": "aiohttp",  # gateway/proxy.py: aiohttp's URL type
}


def _name(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def _optional(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside a `try` that catches ImportError (or in its handler)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            for part in [*node.body, *node.handlers]:
                lines.update(n.lineno for n in ast.walk(part) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return lines


def imported(package: Path, own: tuple[str, ...]) -> dict[str, str]:
    """Top-level modules the package imports (not the standard library's, not its own) -> where first."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        optional = _optional(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in optional:
                continue
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # relative: the package's own
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top and top not in sys.stdlib_module_names and top not in own:
                    found.setdefault(top, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def declared(pyproject: Path) -> set[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = [*project.get("dependencies", []), *(r for extra in project.get("optional-dependencies", {}).values() for r in extra)]
    return {_name(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs}


def distributions(module: str) -> set[str]:
    return {_name(d) for d in md.packages_distributions().get(module, [])}


@pytest.mark.parametrize(
    "package, pyproject, own",
    [
        (REPO / "sparkctl", REPO / "pyproject.toml", ("sparkctl",)),
        (REPO / "lab" / "sparkctl_lab", REPO / "lab" / "pyproject.toml", ("sparkctl", "sparkctl_lab")),
    ],
    ids=["sparkctl", "sparkctl-lab"],
)
def test_every_import_is_declared(package, pyproject, own):
    have = declared(pyproject)
    missing = {
        module: where
        for module, where in imported(package, own).items()
        if not distributions(module) & have and not (module in VIA and VIA[module] in have)
    }
    assert not missing, f"imported but not declared in {pyproject.relative_to(REPO)}: {missing}"


def test_the_lab_declares_what_its_image_copies_for_the_gateway():
    """image.py copies these from this interpreter into the runtime image, skipping one that is not
    installed: undeclared, the lab's image would have no gateway (uvloop alone is optional: asyncio)."""
    from sparkctl_lab.image import IMAGE_LIBRARIES

    have = declared(REPO / "lab" / "pyproject.toml")
    assert {_name(lib) for lib in IMAGE_LIBRARIES} - {"uvloop"} <= have
