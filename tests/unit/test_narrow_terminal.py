"""sparkctl in an 80x24 terminal (a tmux pane): `inventory show`, `status` with unreachable hosts,
`runbook fabric.mtu` and `--help`, run under a pseudo-terminal of 80x24 and replayed into a terminal
emulator (pyte). No line is wider than the terminal (the terminal never wraps one), and no token (an
address, host:port, a path, a device name, an option) is split across lines.

And `--help` of every command, in-process at 80, 60 and 50 columns: the same words as at 200 (click
wraps at spaces only), an Examples section whose commands parse, and a summary that is the help's
whole first sentence, on one line at 80 columns.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import clirun
import pyte
import pytest
import yaml
from controlfiles import usable_here
from loopback_sshd import closed_port
from ptyrun import run_in_pty
from wcwidth import wcswidth

REPO = Path(__file__).resolve().parents[2]
COLUMNS, ROWS = 80, 24
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8", "TERM": "xterm-256color"}
for name in ("SPARKCTL_INVENTORY", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
    ENV.pop(name, None)


class WrapWatchingScreen(pyte.Screen):
    """A terminal screen that notes every line the terminal had to wrap (text past the last column).
    Taller than the pty says (ROWS), so the whole output stays readable; only the width is laid out."""

    def __init__(self) -> None:
        super().__init__(COLUMNS, 2000)
        self.wrapped: list[str] = []

    def draw(self, data: str) -> None:
        if self.cursor.x + max(wcswidth(data), 0) > self.columns:
            self.wrapped.append(data)
        super().draw(data)


def in_terminal(*args: str, timeout: float = 60) -> tuple[int, list[str]]:
    """Run sparkctl with stdin/stdout/stderr on a COLUMNS x ROWS pseudo-terminal; its exit code and
    the screen's lines (right-stripped). Fails when the terminal had to wrap a line."""
    code, raw = run_in_pty(*args, columns=COLUMNS, rows=ROWS, env=ENV, cwd=REPO, timeout=timeout)
    screen = WrapWatchingScreen()
    pyte.ByteStream(screen).feed(raw)
    assert screen.wrapped == [], f"the terminal wrapped: {screen.wrapped[:3]}"
    # the same from the bytes: every line written fits the width
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]", "", raw.decode())
    too_wide = [line for line in re.split(r"\r?\n", text) if wcswidth(line) > COLUMNS]
    assert not too_wide, too_wide[:3]
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return code, lines


def assert_whole(tokens: set[str], lines: list[str]) -> None:
    """Each token is on one line of the screen: none was split across two."""
    split = sorted(t for t in tokens if not any(t in line for line in lines))
    assert not split, f"split across lines (or missing): {split}\n" + "\n".join(lines)


def inventory_tokens(path: Path) -> set[str]:
    """What `inventory show` must never split: ssh targets, addresses, devices, paths, names."""
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(path)
    tokens = {inv.runtime.image, inv.runtime.model, inv.caches.host_path, inv.caches.container_path}
    tokens |= {f"env.{key}" for key in inv.runtime.env}
    for name, host in inv.hosts.items():
        tokens |= {name, inv.ssh_target(name).where}
        for link in host.fabric:
            tokens |= {link.device, str(link.address), *link.rdma}
            back = [o for o in inv.hosts[link.peer].fabric if o.peer == name and o.address.network == link.address.network]
            tokens |= {f"({o.address.ip})" for o in back}  # the peer's address, as show gives it
    if inv.engram:
        tokens |= {inv.engram.source, inv.engram.target}
    return tokens


@pytest.mark.parametrize("name", ["dspark-recipe.yaml", "lab.yaml"])
def test_inventory_show_splits_no_address_path_or_device(name):
    path = REPO / "inventories" / name
    code, lines = in_terminal("inventory", "show", str(path))
    assert code == 0, "\n".join(lines)
    assert_whole(inventory_tokens(path), lines)


@pytest.fixture
def unreachable(tmp_path) -> tuple[Path, dict[str, str]]:
    """The lab inventory with its hosts' SSH on loopback ports where nothing listens; host -> user@address:port."""
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    targets = {}
    for n, (name, host) in enumerate(data["hosts"].items(), start=2):
        address = f"127.0.0.{n}"
        host["ssh"] = {"address": address, "port": closed_port(address)}
        targets[name] = f"{data['ssh_defaults']['user']}@{address}:{host['ssh']['port']}"
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(usable_here(data, tmp_path), sort_keys=False))
    return path, targets


def test_status_shows_an_unreachable_host_on_one_line_and_its_reason_whole_below(unreachable):
    path, targets = unreachable
    code, lines = in_terminal("status", "-i", str(path), "--sample", "0.2")
    assert code == 1, "\n".join(lines)
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 6, "\n".join(lines)  # per host: its error, its container; no wrapped cell
    for row in rows:
        host, container, state = (cell.strip() for cell in row.split("│")[1:4])
        assert host in targets and container and state, f"a continuation line in the table:\n{row}"
    errors = [row for row in rows if row.split("│")[2].strip() == "-"]
    assert len(errors) == 3 and all("cannot connect" in row for row in errors)
    # the whole reason, under the table: user@address:port whole on a line
    assert_whole({f"cannot connect to {target}" for target in targets.values()}, lines)
    assert_whole({"http://127.0.0.2:8888/gateway/engine:", "http://127.0.0.2:8888/gateway/metrics:"}, lines)
    text = " ".join(" ".join(lines).split())
    assert all(f"{host}: cannot connect to {target}: " in text for host, target in targets.items()), text
    assert lines[-1].startswith("not healthy: run `sparkctl doctor`")


def _words(markdown: str) -> set[str]:
    """The words a reader sees of Markdown: without fences, heading marks, emphasis and backticks."""
    prose = "\n".join(line for line in markdown.splitlines() if not line.startswith("```"))
    return {w for w in re.sub(r"[*`#]", " ", prose).split()}


def test_runbook_is_rendered_to_the_width_and_stays_markdown_in_a_file():
    from sparkctl import runbooks

    source = runbooks.text("fabric.mtu")
    code, lines = in_terminal("runbook", "fabric.mtu")
    assert code == 0, "\n".join(lines)
    assert not any(line.lstrip().startswith(("```", "**", "# ")) for line in lines), "\n".join(lines)  # rendered
    missing = _words(source) - {w for line in lines for w in re.sub(r"[*`#]", " ", line).split()}
    assert not missing, f"split or lost: {sorted(missing)}\n" + "\n".join(lines)
    # off a terminal: the Markdown as written (`sparkctl runbook fabric.mtu > fabric.mtu.md`)
    r = clirun.sparkctl(["runbook", "fabric.mtu"], env=ENV, cwd=REPO, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, source, "")


@pytest.mark.parametrize("args", [[], ["reload"]], ids=["sparkctl", "reload"])
def test_help_fits_and_keeps_every_word(args):
    code, lines = in_terminal(*args, "--help")
    assert code == 0, "\n".join(lines)
    wide = clirun.sparkctl([*args, "--help"], env={**ENV, "COLUMNS": "200"}, cwd=REPO, timeout=60)
    assert " ".join(lines).split() == wide.stdout.split()  # only the line breaks moved: no word cut or split
    assert "Examples:" in lines
    if not args:  # the top-level commands in panels
        assert [line for line in lines if line in ("Cluster:", "Diagnose:", "Fleet:", "Inventory & docs:")] == [
            "Cluster:", "Diagnose:", "Inventory & docs:", "Fleet:"]  # fmt: skip


# --- every command's help, in-process ---------------------------------------------------------


def _helps(monkeypatch, columns: int) -> dict[str, tuple[object, str]]:
    """command path -> (click command, its --help at `columns` wide)."""
    import typer.main

    from sparkctl.cli.app import build_app

    monkeypatch.setenv("COLUMNS", str(columns))
    found: dict[str, tuple[object, str]] = {}

    def walk(cmd, path: list[str], parent) -> None:
        ctx = cmd.make_context(path[-1], [], parent=parent, resilient_parsing=True)
        found[" ".join(path)] = (cmd, cmd.get_help(ctx))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name], ctx)

    walk(typer.main.get_command(build_app()), ["sparkctl"], None)
    return found


def test_every_help_keeps_its_words_whole_on_narrow_terminals(monkeypatch):
    def words(text: str) -> list[str]:
        return [w for w in text.split() if w not in ("#", "\\")]  # an example's comment and command go on

    wide = _helps(monkeypatch, 200)
    assert len(wide) > 30
    for columns in (80, 60, 50):  # click never lays help out narrower than 50
        for path, (_, text) in _helps(monkeypatch, columns).items():
            assert max(len(line) for line in text.splitlines()) <= columns, (columns, path, text)
            assert words(text) == words(wide[path][1]), (columns, path, text)


def test_every_command_has_examples_that_parse(monkeypatch):
    from sparkctl.cli.help import split_examples

    helps = _helps(monkeypatch, 80)
    root = helps["sparkctl"][0]
    for path, (cmd, text) in helps.items():
        assert "\nExamples:\n" in text, f"`{path} --help` has no Examples section"
        _, examples = split_examples(getattr(cmd, "help", None) or "")
        assert examples == [], f"{path}: the examples were left in the description"
        for example in cmd.examples:
            for line in example.commands:
                words = shlex.split(line)
                if words[0] != "sparkctl":
                    continue  # promtool, export: the shell around sparkctl
                words = next((words[:i] for i, w in enumerate(words) if w in (">", "|", "&&", ";")), words)
                target, args, name = root, words[1:], "sparkctl"
                while args and args[0] in getattr(target, "commands", {}):
                    name, target, args = args[0], target.commands[args[0]], args[1:]
                target.make_context(name, list(args))  # a usage error (a mistyped option) raises


def test_summaries_are_whole_sentences_on_one_line(monkeypatch):
    from sparkctl.cli.help import summary

    for path, (cmd, text) in _helps(monkeypatch, 80).items():
        if path != "sparkctl":  # a group's list shows this command's summary
            first = " ".join(cmd.help.split("\n\n")[0].split())
            assert summary(cmd) == first and first.endswith("."), f"{path}: {summary(cmd)!r} is not its first paragraph"
        listing = re.split(r"\n(?:Cluster|Diagnose|Fleet|Inventory & docs|Development|Commands):\n", text)[1:]
        for section in listing:
            rows = section.split("\n\n")[0].splitlines()
            assert all(re.match(r"  \S", row) for row in rows), f"`{path} --help` wraps a summary:\n{section}"
