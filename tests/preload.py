"""The tests' sparkctl runs, without importing sparkctl's libraries afresh for each one.

The suite makes about a thousand `python -m sparkctl ...` runs. On CI's 2-core machine each one
spent 0.5-0.6 CPU-s importing the same third-party libraries (pydantic, typer, rich, paramiko,
httpx, jinja2, docker, ...) before sparkctl did anything: about a quarter of the suite's CPU, on a
suite bound by its CPU. Here one server process per test session imports those libraries once, and
every run is a fork of it (the way multiprocessing's forkserver starts its workers).

A forked run keeps what a plain run has:
- a process of its own: its own pid (os.kill, Popen.kill, a lock naming it), exit status and
  signals (an uncaught KeyboardInterrupt ends it by SIGINT, as Python does);
- the argv, environment, working directory and stdin/stdout/stderr its caller gave it;
- every module as it would be after its own import. The server imports the libraries and every
  sparkctl module (but `__main__`), and does nothing else: no command has run in it, no module's
  state has moved. What an import reads of the environment is what the server's environment said,
  so the server notes every variable read while it imports (os.environ watched) and a run is forked
  only when its environment agrees with the server's on each of them. None of sparkctl's own are
  among them (test_preload forks runs with other SPARKCTL_* variables, PATH and COLUMNS); HOME is
  (Python's sysconfig reads it at import), so a run with another HOME is a plain process.

It differs in two ways. The modules are already imported, so a test cannot see what a command
imports: benchmarks/ measures that, and the tests that look at sys.modules run `python -c`, which is
never forked. And all runs share one hash seed.

A run is forked only when a plain run would start the same way. Otherwise it is a plain process:
- a command other than `[sys.executable, "-m", "sparkctl", ...]`;
- preexec_fn, a new session or process group, pass_fds, or a user or group change;
- an environment whose PYTHON* or locale variables differ from the server's (they shape start-up),
  or any variable an import read (above).

- conftest.py installs `Popen` as subprocess.Popen, so subprocess.run and friends use it.
- `bin_dir()` holds a `sparkctl` for shell scripts (the drills run runbook blocks as written).
- SPARKCTL_TEST_PRELOAD=0 makes every run a plain process; SPARKCTL_TEST_PRELOAD_LOG=FILE has the
  server append one JSON line per run (its command, CPU seconds, wall seconds and the test that ran it).
"""

from __future__ import annotations

import atexit
import collections.abc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# What the server imports: the libraries every sparkctl command pays for, and the ones its
# commands import lazily (docker-py for the engine, ssl and certifi for HTTPS).
LIBRARIES = (
    "sparkctl.transport",  # paramiko, imported the way sparkctl imports it (invoke hidden)
    "pydantic", "typer", "rich.console", "rich.table", "rich.progress", "rich.live", "yaml", "jinja2",
    "httpx", "httpx_sse", "tenacity", "prometheus_client", "prometheus_client.parser", "docker", "ssl",
    "certifi", "concurrent.futures", "shlex", "ipaddress", "hashlib", "tarfile",
)  # fmt: skip
# What those import only on first use, which every command reaches: pydantic's BaseModel (its
# __init__ is lazy), typer's pydantic adapters (parsing the options), httpx's httpcore (the first
# client); ~90 CPU-ms of each forked run. Internals: imported where the installed release has them
# (the floors' typer has no _adapters).
FIRST_USE = (
    "pydantic.main", "pydantic.json_schema", "pydantic.type_adapter", "typer._adapters", "httpcore", "h11",
    "anyio", "rich.status", "statistics", "zoneinfo", "glob", "secrets",
)  # fmt: skip
STARTUP_ENV = ("LANG", "LC_ALL", "LC_CTYPE")  # and every PYTHON* variable: they shape interpreter start-up
SOCKET_ENV = "SPARKCTL_TEST_PRELOAD_SOCKET"  # where bin_dir()'s sparkctl finds the server
LOG_ENV = "SPARKCTL_TEST_PRELOAD_LOG"  # a file: the server appends each run's command, CPU and wall
HERE = os.path.abspath(__file__)
_READ_AT_IMPORT: set[str] = set()  # in the server: the variables its imports read (_import_all)


# ---------------------------------------------------------------- the server (its own process)


class _Watched(collections.abc.MutableMapping):
    """os.environ while the server imports: each variable read goes into `read` ("*" when something
    reads them all)."""

    def __init__(self, environ) -> None:
        self.environ, self.read, self.watching = environ, set(), True

    def _note(self, key: str) -> None:
        if self.watching:
            self.read.add(key)

    def __getitem__(self, key):
        self._note(key)
        return self.environ[key]

    def __contains__(self, key):
        self._note(key)
        return key in self.environ

    def __iter__(self):
        self._note("*")
        return iter(self.environ)

    def __setitem__(self, key, value):
        self.environ[key] = value

    def __delitem__(self, key):
        del self.environ[key]

    def __len__(self):
        return len(self.environ)

    def copy(self):
        self._note("*")
        return self.environ.copy()


def _import_all() -> set[str]:
    """Import LIBRARIES, FIRST_USE and every sparkctl module but __main__; the environment
    variables those imports read."""
    import importlib
    import importlib.util
    import pkgutil
    import wsgiref.handlers  # noqa: F401 - copies the whole environment for the WSGI apps it serves; no
    # sparkctl command serves one (prometheus_client imports it), so its copy is not a variable read

    watched = os.environ = _Watched(os.environ)
    try:
        for name in LIBRARIES:
            importlib.import_module(name)
        for name in FIRST_USE:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        import sparkctl

        for mod in pkgutil.walk_packages(sparkctl.__path__, "sparkctl."):
            if not mod.name.endswith(".__main__"):  # runpy runs it as __main__
                importlib.import_module(mod.name)
    finally:
        os.environ, watched.watching = watched.environ, False  # (a module holding it still reads through)
    return watched.read


def serve(path: str) -> None:
    """Import the modules, listen on `path`, and for each request fork a monitor that forks the run.
    Ends when its stdin closes (the test session that started it has ended)."""
    import warnings

    global _READ_AT_IMPORT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _READ_AT_IMPORT = _import_all()
    if caught:  # a plain run would print it on its own stderr: forked runs would not, so no forking
        print(f"no: importing the modules warned: {caught[0].message}", flush=True)
        return
    if "*" in _READ_AT_IMPORT:  # every variable would have to agree: no run would be forked
        print("no: an import reads the whole environment", flush=True)
        return
    if threading.active_count() != 1:  # a fork copies one thread
        print(f"no: importing started threads ({threading.active_count() - 1})", flush=True)
        return
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    stop = os.fdopen(0, "rb", buffering=0)
    print("ready " + json.dumps(sorted(_READ_AT_IMPORT)), flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # no run or monitor holds the starter's pipe
    os.close(devnull)
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    sel.register(stop, selectors.EVENT_READ)
    with sel, srv, stop:
        while True:
            for key, _ in sel.select():
                if key.fileobj is stop:
                    return
                conn, _ = srv.accept()
                if os.fork() == 0:
                    sel.close()
                    srv.close()
                    _monitor(conn)  # never returns
                conn.close()


def _monitor(conn: socket.socket) -> None:
    """One request: fork the run, send its pid, wait for it, send its wait status."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # to wait for the run (and the run's own children)
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        req = json.loads(msg)
        if not same_startup(req["env"], dict(os.environ), _READ_AT_IMPORT):  # bin_dir()'s sparkctl: plain
            conn.send(json.dumps({"pid": None}).encode())
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _become(req, fds)  # never returns
        for fd in fds:
            os.close(fd)  # the run holds its ends alone: its reader sees EOF when it ends
        conn.send(json.dumps({"pid": pid}).encode())
        began = time.monotonic()
        _, status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        if os.environ.get(LOG_ENV):  # one line per run: what the suite's runs cost (benchmarks/suite-time.md)
            line = {"argv": req["argv"][3 if req["mode"] == "module" else 1 :][:3], "cpu": round(cpu, 3),
                    "wall": round(time.monotonic() - began, 3), "test": req["env"].get("PYTEST_CURRENT_TEST")}  # fmt: skip
            with open(os.environ[LOG_ENV], "a") as f:
                f.write(json.dumps(line) + "\n")
        try:
            conn.send(json.dumps({"status": status}).encode())
        except OSError:
            pass  # nobody waits (a fire-and-forget run)
    except BaseException:  # noqa: BLE001 - a monitor must never return into the server's loop
        code = 1
    os._exit(code)


def _become(req: dict, fds: list[int]) -> None:
    """In the forked run: take the caller's stdio, argv, env and cwd, run sparkctl, exit as Python does."""
    import io
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    enc, _, errors = os.environ.get("PYTHONIOENCODING", "").partition(":")
    enc = enc or sys.stdout.encoding
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, mode: str, errs: str, line: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buf = raw if unbuffered and mode == "w" else (io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw))
        return io.TextIOWrapper(buf, encoding=enc, errors=errs, line_buffering=line, write_through=unbuffered)

    sys.stdin = sys.__stdin__ = stream(0, "r", errors or "strict", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", errors or "strict", unbuffered or os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", "backslashreplace", True)
    code = 0
    try:
        if req["mode"] == "module":  # python -m sparkctl ARGS: sys.path[0] is the working directory
            sys.argv = ["-m", *req["argv"][3:]]  # [python, -m, sparkctl, ARGS...]
            sys.path[0] = req["cwd"]
            runpy.run_module("sparkctl", run_name="__main__", alter_sys=True)
        else:  # the console script: sys.path[0] is its directory
            sys.argv = list(req["argv"])
            sys.path[0] = os.path.dirname(req["argv"][0])
            runpy.run_path(req["argv"][0], run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - printed as Python prints an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # what interpreter exit does: wait for non-daemon threads, then atexit
    atexit._run_exitfuncs()
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:  # noqa: BLE001 - Python exits 120 when it cannot flush stdout
            code = code or 120
    if code == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# ---------------------------------------------------------------- the client (the test session)


class _Server:
    """This session's server, started at the first forked run; it ends with the session."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sparkctl-preload-")
        self.path = os.path.join(self.dir, "socket")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, HERE, "--serve", self.path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=self.env, cwd=self.dir)  # fmt: skip
        line = self.proc.stdout.readline().strip()  # blocks while it imports (~1 s)
        self.ok = line.startswith("ready ")
        self.read_at_import = set(json.loads(line.removeprefix("ready "))) if self.ok else set()
        if not self.ok:
            print(f"[tests/preload.py: every sparkctl run is a plain process ({line or 'the server died'})]",
                  file=sys.stderr)  # fmt: skip
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)  # (a second stop, atexit's after the caller's: nothing left)


def same_startup(env: dict, other: dict, read_at_import: set[str] = frozenset()) -> bool:
    """Would a process started with `env` start (and import) like one started with `other`?"""
    keys = {k for k in (*env, *other) if k.startswith("PYTHON") or k in STARTUP_ENV} | read_at_import
    return all(env.get(k) == other.get(k) for k in keys)


_server: _Server | None = None
_server_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get("SPARKCTL_TEST_PRELOAD", "1") != "0" and sys.platform == "linux"


def server() -> _Server | None:
    global _server
    if not enabled():
        return None
    with _server_lock:
        if _server is None:
            _server = _Server()
    return _server if _server.ok else None  # (ok goes False if the server dies)


def launch(path: str, mode: str, argv: list[str], env: dict, cwd: str, fds: list[int]) -> tuple[socket.socket, int]:
    """Ask the server at `path` for a run; returns the connection its wait status will come on, and
    its pid. OSError when the server is gone or declines (a different start-up environment)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        req = {"mode": mode, "argv": argv, "env": env, "cwd": cwd}
        socket.send_fds(conn, [json.dumps(req).encode()], fds)
        reply = conn.recv(1 << 16)
        pid = json.loads(reply)["pid"] if reply else None
        if pid is None:
            raise OSError("the preload server did not start the run")
        return conn, pid
    except BaseException:
        conn.close()
        raise


class Popen(subprocess.Popen):
    """subprocess.Popen; a `python -m sparkctl` run is forked from the server (the module docstring)."""

    _preload_conn: socket.socket | None = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                       shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest):  # fmt: skip
        restore_signals, gid, gids, uid, umask, start_new_session, *group = rest
        srv = None
        plain_start = (executable is None and preexec_fn is None and not shell and not pass_fds and gid is None
                       and gids is None and uid is None and umask < 0 and not start_new_session
                       and (not group or group[0] in (None, -1)))  # fmt: skip
        if (
            plain_start
            and isinstance(args, (list, tuple))
            and [os.fspath(a) for a in args[:3]] == [sys.executable, "-m", "sparkctl"]
        ):
            env = dict(os.environ if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})
            srv = server()
            if srv is not None and not same_startup(env, srv.env, srv.read_at_import):
                srv = None
        if srv is not None:
            fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
            where = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
            try:
                self._preload_conn, self.pid = launch(srv.path, "module", [os.fspath(a) for a in args], env, where, fds)
            except OSError as e:  # the server is gone: this run (and the rest) start plainly
                print(f"[tests/preload.py: {e}; a plain process]", file=sys.stderr)
                srv.ok = False
            else:
                self._child_created = True
                self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
                return
        return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                                      creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
                                      errwrite, *rest)  # fmt: skip

    def _preload_status(self, block: bool) -> int | None:
        """The run's wait status from its monitor; None while it runs (when not blocking)."""
        conn = self._preload_conn
        conn.setblocking(block)
        try:
            msg = conn.recv(1 << 16)
        except BlockingIOError:
            return None
        conn.close()
        self._preload_conn = None
        if not msg:  # the monitor died without a word: there is no status to give
            return 255 << 8
        return json.loads(msg)["status"]

    def _try_wait(self, wait_flags):
        if self._preload_conn is None:
            return super()._try_wait(wait_flags)
        status = self._preload_status(block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)

    def _internal_poll(self, _deadstate=None, **kwargs):
        if self._preload_conn is None:
            return super()._internal_poll(_deadstate=_deadstate, **kwargs)
        if not self._waitpid_lock.acquire(False):
            return None  # another thread is waiting for it
        try:
            if self.returncode is None and self._preload_conn is not None:
                status = self._preload_status(block=False)
                if status is not None:
                    self._handle_exitstatus(status)
        finally:
            self._waitpid_lock.release()
        return self.returncode


def bin_dir() -> str | None:
    """A folder whose `sparkctl` runs like the console script next to sys.executable, forked: put it
    first on a shell's PATH. Its runs need SOCKET_ENV (socket_env()) in their environment."""
    srv = server()
    if srv is None:
        return None
    script = os.path.join(os.path.dirname(sys.executable), "sparkctl")
    shim = os.path.join(srv.dir, "sparkctl")
    if not os.path.exists(shim):
        with open(shim + ".tmp", "w") as f:  # python -S -E: the client needs the standard library only
            f.write(f'#!/bin/sh\nexec "{sys.executable}" -S -E "{HERE}" --run "{script}" "$@"\n')
        os.chmod(shim + ".tmp", 0o755)
        os.replace(shim + ".tmp", shim)
    return srv.dir


def socket_env() -> dict[str, str]:
    srv = server()
    return {SOCKET_ENV: srv.path} if srv is not None else {}


def _run_from_shell(script: str, args: list[str]) -> None:
    """bin_dir()'s sparkctl: the console script's run, forked; this process relays signals and its
    exit. Without a server (or with a different start-up environment) it becomes the script itself."""
    argv = [script, *args]
    try:
        conn, pid = launch(os.environ[SOCKET_ENV], "script", argv, dict(os.environ), os.getcwd(), [0, 1, 2])
    except (KeyError, OSError, ValueError):
        os.execv(script, argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    msg = conn.recv(1 << 16)
    code = os.waitstatus_to_exitcode(json.loads(msg)["status"]) if msg else 255
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        sys.path[0] = os.getcwd()  # as for any process started in the server's folder (nothing there)
        serve(sys.argv[2])
    elif sys.argv[1] == "--run":
        _run_from_shell(sys.argv[2], sys.argv[3:])
