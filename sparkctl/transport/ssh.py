"""SSH to the cluster's hosts: one Fabric connection per host per run, reused for everything.

- `HostSession` wraps a Fabric `Connection` for one inventory host: host keys are verified with
  sparkctl's policy (never Fabric's auto-add), connection errors are retried with tenacity, and
  commands are never retried blindly (a command may have changed state before it failed).
- `Fleet` holds the sessions of a run and runs a function on every host in parallel, returning
  one `Outcome` per host (value or error, and how long it took), so a slow or dead host never
  hides the others' results.
"""

from __future__ import annotations

import shlex
import socket
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Mapping, Optional, TypeVar

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from sparkctl.errors import HostError, SparkctlError
from sparkctl.inventory.models import Inventory, SSHTarget
from sparkctl.transport import hostkeys
from sparkctl.transport.redact import redact

T = TypeVar("T")

CONNECT_ATTEMPTS = 3


@dataclass(frozen=True)
class CommandResult:
    host: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self, what: str = "") -> "CommandResult":
        """Raise a HostError naming host, command and stderr unless the command succeeded."""
        if not self.ok:
            label = what or self.command
            raise HostError(
                f"{self.host}: {label} failed (exit {self.exit_code}): {redact(self.stderr.strip() or self.stdout.strip())[:600]}"
            )
        return self


def _is_transient(exc: BaseException) -> bool:
    """Connection errors worth another try; never a host-key or authentication refusal."""
    if isinstance(exc, (paramiko.BadHostKeyException, paramiko.AuthenticationException, SparkctlError)):
        return False
    return isinstance(
        exc,
        (
            paramiko.ssh_exception.NoValidConnectionsError,
            paramiko.SSHException,
            socket.timeout,
            ConnectionError,
            EOFError,
            OSError,
        ),
    )


class HostSession:
    """One SSH connection to one host, opened on first use and reused for the whole run."""

    def __init__(self, target: SSHTarget):
        self.target = target
        self.name = target.name
        self._conn: Optional[Connection] = None
        self._docker = None

    # -- connection -----------------------------------------------------------------------

    def _new_connection(self) -> Connection:
        t = self.target
        # No ~/.ssh/config, no system config: the inventory is the whole truth about a host.
        config = Config(
            ssh_config=paramiko.SSHConfig(), overrides={"load_ssh_configs": False, "run": {"in_stream": False}}
        )
        connect_kwargs: dict[str, Any] = {"banner_timeout": t.connect_timeout, "auth_timeout": t.connect_timeout}
        if t.key is not None:
            connect_kwargs.update(key_filename=str(t.key), look_for_keys=False, allow_agent=False)
        conn = Connection(
            host=t.address,
            user=t.user,
            port=t.port,
            config=config,
            connect_timeout=max(1, int(t.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        # Fabric installs AutoAddPolicy in Connection(); replace it before anything connects.
        hostkeys.install_policy(conn.client, t.known_hosts, t.host_key_policy, t.name)
        return conn

    def connect(self) -> "HostSession":
        if self._conn is not None and self._conn.is_connected:
            return self
        t = self.target
        from sparkctl.transport.guard import check_address

        check_address(t.address, f"SSH to {t.name}")
        if t.key is not None and not t.key.exists():
            raise HostError(
                f"{t.name}: SSH key {t.key} does not exist",
                fix="point ssh.key (or ssh_defaults.key) in the inventory at the private key for this host",
            )

        @retry(
            retry=retry_if_exception(_is_transient),
            stop=stop_after_attempt(CONNECT_ATTEMPTS),
            wait=wait_exponential(multiplier=0.2, max=2),
            reraise=True,
        )
        def attempt() -> Connection:
            conn = self._new_connection()
            conn.open()
            return conn

        try:
            self._conn = attempt()
        except paramiko.BadHostKeyException as exc:
            raise hostkeys.describe_bad_host_key(exc, t.known_hosts, t.name, t.address, t.port) from None
        except paramiko.AuthenticationException as exc:
            raise HostError(
                f"{t.name}: SSH authentication failed for {t.user}@{t.address}:{t.port}: {exc}",
                fix="check ssh.user and ssh.key in the inventory and that the public key is in the host's authorized_keys",
            ) from None
        except SparkctlError:
            raise
        except Exception as exc:  # after retries: unreachable
            raise HostError(
                f"{t.name}: cannot connect to {t.user}@{t.address}:{t.port} after {CONNECT_ATTEMPTS} attempts: "
                f"{type(exc).__name__}: {exc}",
                fix="check the host is up, sshd runs, and ssh.address/port in the inventory are right",
            ) from None
        return self

    @property
    def connection(self) -> Connection:
        self.connect()
        assert self._conn is not None
        return self._conn

    @property
    def paramiko_client(self) -> paramiko.SSHClient:
        return self.connection.client

    def close(self) -> None:
        if self._docker is not None:
            try:
                self._docker.close()
            except Exception:
                pass
            self._docker = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- commands -------------------------------------------------------------------------

    def run(
        self,
        command: str | list[str],
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> CommandResult:
        """Run a command; return its result (non-zero exit is data, not an exception).

        A list is shell-quoted. Never retried: it may have changed state before failing.
        """
        cmd = command if isinstance(command, str) else shlex.join(command)
        if env:
            cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + cmd
        conn = self.connection
        start = time.monotonic()
        try:
            r = conn.run(cmd, hide=True, warn=True, in_stream=False, timeout=timeout)
        except CommandTimedOut:
            raise HostError(f"{self.name}: command timed out after {timeout} s: {redact(cmd)[:200]}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(f"{self.name}: connection lost while running {redact(cmd)[:200]}: {exc}") from None
        return CommandResult(self.name, cmd, r.exited, r.stdout, r.stderr, time.monotonic() - start)

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a file on the host atomically (temp file + rename) over SFTP."""
        sftp = self.paramiko_client.open_sftp()
        try:
            tmp = f"{remote_path}.sparkctl-tmp"
            with sftp.open(tmp, "wb") as f:
                f.write(data)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, remote_path)
        finally:
            sftp.close()

    # -- docker ---------------------------------------------------------------------------

    def docker(self):
        """Docker SDK client for this host's engine, over this SSH connection (see docker.py)."""
        if self._docker is None:
            from sparkctl.transport.docker import docker_over_ssh

            self._docker = docker_over_ssh(self)
        return self._docker


@dataclass
class Outcome(Generic[T]):
    """What one host returned (or why it could not), and how long it took."""

    host: str
    value: Optional[T] = None
    error: Optional[str] = None
    fix: Optional[str] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Fleet:
    """The SSH sessions of one run, one per host, and parallel execution over them."""

    inventory: Inventory
    hosts: Optional[Iterable[str]] = None
    sessions: dict[str, HostSession] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        names = list(self.hosts) if self.hosts is not None else list(self.inventory.hosts)
        unknown = [n for n in names if n not in self.inventory.hosts]
        if unknown:
            from sparkctl.errors import InputError

            raise InputError(
                f"unknown host(s): {', '.join(unknown)}",
                fix=f"hosts in this inventory: {', '.join(self.inventory.hosts)}",
            )
        self.sessions = {n: HostSession(self.inventory.ssh_target(n)) for n in names}

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()

    def __getitem__(self, name: str) -> HostSession:
        return self.sessions[name]

    def map(
        self,
        fn: Callable[[HostSession], T],
        hosts: Optional[Iterable[str]] = None,
        timeout: Optional[float] = None,
    ) -> dict[str, Outcome[T]]:
        """Run fn(session) on every host at once; one Outcome per host, in inventory order."""
        names = list(hosts) if hosts is not None else list(self.sessions)
        results: dict[str, Outcome[T]] = {}

        def one(name: str) -> Outcome[T]:
            start = time.monotonic()
            try:
                value = fn(self.sessions[name])
                return Outcome(name, value=value, seconds=time.monotonic() - start)
            except SparkctlError as exc:
                return Outcome(name, error=redact(exc.message), fix=exc.fix, seconds=time.monotonic() - start)
            except Exception as exc:  # a bug or an unexpected remote answer: still per host
                return Outcome(
                    name, error=redact(f"{type(exc).__name__}: {exc}"), seconds=time.monotonic() - start
                )

        if not names:
            return results
        pool = ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="sparkctl-host")
        futures = {pool.submit(one, n): n for n in names}
        done, pending = wait(futures, timeout=timeout)
        for fut in pending:
            name = futures[fut]
            results[name] = Outcome(name, error=f"{name}: no answer within {timeout} s", seconds=timeout or 0.0)
            self.sessions[name].close()  # unblock the stuck thread's socket
        for fut in done:
            results[futures[fut]] = fut.result()
        pool.shutdown(wait=False, cancel_futures=True)
        return {n: results[n] for n in names}
