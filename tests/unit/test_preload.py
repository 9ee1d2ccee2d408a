"""tests/preload.py: a forked `python -m sparkctl` run behaves as a plain one where a test can look:
its output, exit status, pid and signals, and the shell's `sparkctl` in bin_dir()."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import preload
import pytest
import yaml
from controlfiles import usable_here

pytestmark = pytest.mark.skipif(preload.server() is None, reason="the preload server cannot run here")

REPO = Path(__file__).resolve().parents[2]
SPARKCTL = [sys.executable, "-m", "sparkctl"]
PLAIN = {**os.environ, "PYTHONPRELOADTEST": "plain"}  # a start-up variable the server lacks: a plain process


def forked(p: subprocess.Popen) -> bool:
    """Is this run a fork of the server (its command line is the server's, not `python -m sparkctl`)?"""
    with open(f"/proc/{p.pid}/cmdline", "rb") as f:
        return b"--serve" in f.read()


def both(*args: str, **kw) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    a = subprocess.run([*SPARKCTL, *args], capture_output=True, text=True, timeout=60, **kw)
    b = subprocess.run([*SPARKCTL, *args], capture_output=True, text=True, timeout=60, env=PLAIN, **kw)
    return a, b


def test_a_forked_run_answers_as_a_plain_one(tmp_path):
    for args in (["--help"], ["render", "--help"], ["no-such-command"], ["render", "-i", str(tmp_path / "none.yaml")]):
        a, b = both(*args)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
    assert both("no-such-command")[0].returncode == 2


def test_which_runs_are_forked():
    p = subprocess.Popen([*SPARKCTL, "lab", "--help"], stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    assert forked(p)
    p.communicate()
    q = subprocess.Popen([*SPARKCTL, "lab", "--help"], stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=PLAIN)
    assert not forked(q)  # a different start-up environment
    q.communicate()
    r = subprocess.Popen([*SPARKCTL, "lab", "--help"], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                         start_new_session=True)  # fmt: skip
    assert not forked(r)
    r.communicate()


def test_a_run_is_forked_only_where_its_imports_would_read_the_same_environment():
    """The server has imported every module: a variable an import reads (typer reads TYPER_USE_RICH
    when it is imported) must agree with the server's, or the run is a plain process. sparkctl's own
    variables and the ones tests change are read at run time, so those runs stay forked."""
    run_time = {**os.environ, "SPARKCTL_LAB_INSTANCE": "2", "SPARKCTL_INVENTORY": "x.yaml",
                "PATH": "/usr/bin:/bin", "COLUMNS": "100"}  # fmt: skip
    p = subprocess.Popen([*SPARKCTL, "--help"], stdout=subprocess.PIPE, env=run_time)
    assert forked(p)
    p.communicate()
    no_rich = {**os.environ, "TYPER_USE_RICH": "0", "COLUMNS": "100"}
    q = subprocess.Popen([*SPARKCTL, "--help"], stdout=subprocess.PIPE, text=True, env=no_rich)
    assert not forked(q)
    plain = subprocess.run([*SPARKCTL, "--help"], capture_output=True, text=True, env={**no_rich, **PLAIN}, timeout=60)
    assert q.communicate(timeout=60)[0] == plain.stdout


def test_the_working_directory_stdin_and_environment_are_the_callers(tmp_path):
    (tmp_path / "inventory.yaml").write_text("not: [an inventory\n")
    env = {**os.environ, "SPARKCTL_INVENTORY": "inventory.yaml", "COLUMNS": "200"}
    a = subprocess.run([*SPARKCTL, "render"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    b = subprocess.run([*SPARKCTL, "render"], capture_output=True, text=True, cwd=tmp_path, env={**env, **PLAIN},
                       timeout=60)  # fmt: skip
    assert a.returncode == b.returncode != 0 and "inventory.yaml" in a.stderr
    assert (a.stdout, a.stderr) == (b.stdout, b.stderr)


class Silent:
    """The lab's inventory with every host at a loopback port that accepts and never answers: a
    `sparkctl status` on it waits for the SSH banner (its connect_timeout: 4 s)."""

    def __init__(self, tmp_path: Path):
        doc = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
        doc["ssh_defaults"].update(connect_timeout=4)
        self.listeners: list[socket.socket] = []
        self.held: list[socket.socket] = []  # accepted and kept open: the client keeps waiting for a banner
        for n, host in enumerate(doc["hosts"].values(), start=1):
            self.listeners.append(socket.create_server((f"127.0.0.{n}", 0)))
            self.listeners[-1].setblocking(False)
            host["ssh"].update(address=f"127.0.0.{n}", port=self.listeners[-1].getsockname()[1])
        self.path = tmp_path / "inv.yaml"
        self.path.write_text(yaml.safe_dump(usable_here(doc, tmp_path)))  # a key and known_hosts of its own

    def _accept(self, ready) -> int:
        n = 0
        for s in ready:
            while True:
                try:
                    self.held.append(s.accept()[0])
                    n += 1
                except BlockingIOError:
                    break
        return n

    def start(self, env: dict, *args: str) -> subprocess.Popen:
        """`sparkctl status` on these hosts, returned once it is waiting for a banner: its imports and
        its signal handling are in place (a sleep instead would race a busy machine's imports)."""
        self._accept(self.listeners)  # an earlier run's late connections
        p = subprocess.Popen([*SPARKCTL, "status", "-i", str(self.path), *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**env, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8"})  # fmt: skip
        end = time.monotonic() + 60
        while not self._accept(select.select(self.listeners, [], [], 1)[0]):
            assert p.poll() is None and time.monotonic() < end, p.communicate()
        return p

    def close(self) -> None:
        for s in self.held + self.listeners:
            s.close()


@pytest.fixture
def silent(tmp_path):
    s = Silent(tmp_path)
    yield s
    s.close()


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, -signal.SIGTERM)])
def test_a_signal_ends_the_run_itself(silent, sig, code):
    p = silent.start(os.environ, "--json")
    assert forked(p)
    os.kill(p.pid, sig)  # its own pid, as a test's kill or a lock holder's pid is
    p.communicate(timeout=30)
    assert p.returncode == code


def test_ctrl_c_ends_it_as_sparkctl_ends_on_ctrl_c(silent):
    runs = []
    for env in (os.environ, PLAIN):
        p = silent.start(env)
        p.send_signal(signal.SIGINT)  # (sparkctl ends when the connection attempt does)
        out, err = p.communicate(timeout=30)
        runs.append((p.returncode, out, err))
    assert runs[0] == runs[1] and runs[0][0] != 0


def test_the_shells_sparkctl_is_the_console_script(tmp_path):
    env = {**os.environ, "PATH": f"{preload.bin_dir()}:{os.environ['PATH']}", **preload.socket_env()}
    script = os.path.join(os.path.dirname(sys.executable), "sparkctl")
    a = subprocess.run(["bash", "-c", "command -v sparkctl; sparkctl --help; sparkctl nope; echo rc=$?"],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    b = subprocess.run(["bash", "-c", f"{script} --help; {script} nope; echo rc=$?"], capture_output=True, text=True,
                       env={**os.environ, **PLAIN}, timeout=60)  # fmt: skip
    where, _, out = a.stdout.partition("\n")
    assert where == os.path.join(preload.bin_dir(), "sparkctl")
    assert (out, a.stderr) == (b.stdout, b.stderr) and out.endswith("rc=2\n")
