"""SSH to the cluster's hosts: one paramiko connection per host per run, reused for everything.

- `HostSession` holds a paramiko `SSHClient` for one inventory host, reached as the inventory and
  then the operator's ssh_config say (sshconfig.py), through its ProxyJump hosts if any: host keys
  are verified on every hop with sparkctl's policy (known_hosts; accept-new at most), keys are
  offered in ssh's order (key files, then the agent), refused connections are retried with tenacity
  (within one connect timeout), and commands are never retried blindly (a command may have
  changed state before it failed).
- Every remote call has a deadline: the connect timeout; a timeout on every command (the
  inventory's `ssh.timeout` unless the caller passes a longer one, e.g. for a transfer); and a
  watchdog per connection that asks sshd for a reply every few seconds and, when none comes
  within the connect timeout (link down, sshd frozen), names the host and closes the connection,
  which ends every call blocked on it. A host that stopped answering stays failed for the run.
- `Fleet` holds the sessions of a run and runs a function on every host in parallel, returning
  one `Outcome` per host (value or error, and how long it took), so a slow or dead host never
  hides the others' results.
- Ctrl-C ends a run at once, whatever a host's deadline: nothing waits for a host after it (a
  host's work runs on a daemon thread, and closing a session never waits for its connect).
"""

from __future__ import annotations

import logging
import re
import select
import shlex
import socket
import threading
import time
from concurrent.futures import Future
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, Iterable, Optional, TypeVar

import paramiko
import paramiko.auth_strategy
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from sparkctl import waits
from sparkctl.errors import HostError, SparkctlError, UnreachableError, UnreachableReason
from sparkctl.inventory.models import Inventory
from sparkctl.inventory.ssh_target import SSHHop, SSHTarget
from sparkctl.transport import hostkeys
from sparkctl.transport.failures import FIX_FROZEN, FIX_REACH, describe, unresponsive
from sparkctl.transport.redact import redact

T = TypeVar("T")

# paramiko logs its transport thread's tracebacks (banner timeouts, resets); sparkctl reports each
# failure once, as its own message, so they must not reach the terminal through logging's default.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CONNECT_ATTEMPTS = 3
SUSPEND_GRACE = 1.0  # s the watchdog waits past its deadline for a reply queued while the process was suspended
MIN_TRANSFER_RATE = 20e6  # bytes/s: slower than this, a copy is reported as hung, not waited for


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


class _JumpFailed(Exception):
    """Connecting through a jump host failed at that hop (`forward_to`: the jump host itself
    answered, but could not open the channel to that next hop)."""

    def __init__(self, hop: SSHHop, error: BaseException, forward_to: Optional[SSHHop] = None):
        super().__init__(str(error))
        self.hop, self.error, self.forward_to = hop, error, forward_to


def _is_transient(exc: BaseException) -> bool:
    """Connection errors worth another try: sshd refused or dropped us (restarting, MaxStartups).
    Never a timeout (it already cost a whole connect timeout), a host key or an authentication."""
    if isinstance(exc, _JumpFailed):
        exc = exc.error
    never = (paramiko.BadHostKeyException, paramiko.AuthenticationException, SparkctlError, TimeoutError)
    worth = (paramiko.ssh_exception.NoValidConnectionsError, paramiko.SSHException, ConnectionError, EOFError)
    return isinstance(exc, worth) and not isinstance(exc, never)


def _tune_socket(sock: socket.socket, deadline: float) -> None:
    """Let the kernel give up on a peer that stops acknowledging (TCP_USER_TIMEOUT) and probe an
    idle connection, so a dead link breaks the socket instead of leaving unsent bytes queued for
    the kernel's ~15 minutes of retransmissions."""
    # not a TCP socket (tests) or not Linux: the watchdog still runs
    with suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, int(deadline / 2)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, int(deadline / 4)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        # later than the watchdog (deadline + one interval), whose message says more
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(deadline * 2000))


def _exec(
    transport: paramiko.Transport,
    command: str,
    deadline: float,
    stdin: Optional[bytes] = None,
    on_line: Optional[Callable[[str], None]] = None,
) -> tuple[int, str, str]:
    """Run `command` on a new channel; (exit status, stdout, stderr). Both streams are read as
    they come (a full stderr must not stall stdout); past `deadline` (monotonic) the channel is
    closed and TimeoutError raised. No pty. `stdin`, when given, is sent and the channel's input
    closed (a secret handed to the command this way is in no command line); `on_line` is called
    with every line (ended by a newline or a carriage return) of either stream as it arrives."""
    chan = transport.open_session(timeout=max(0.1, deadline - time.monotonic()))
    try:
        chan.exec_command(command)
        if stdin is not None:
            chan.sendall(stdin)
            chan.shutdown_write()
        out, err = bytearray(), bytearray()
        pending = {"out": bytearray(), "err": bytearray()}

        def lines(stream: str, data: bytes) -> None:
            if on_line is None:
                return
            buf = pending[stream]
            buf += data
            if data:
                *done, rest = re.split(rb"[\r\n]", bytes(buf))
            else:  # end of the stream: what is left is the last line
                done, rest = [bytes(buf)], b""
            buf[:] = rest
            for line in done:
                if line.strip():
                    on_line(line.decode("utf-8", "replace"))

        out_open = err_open = True
        while out_open or err_open:
            moved = False
            if out_open and (chan.recv_ready() or chan.eof_received or chan.closed):
                data = chan.recv(1 << 16)  # ready or at EOF: does not block
                out += data
                lines("out", data)
                out_open, moved = bool(data), True
            if err_open and (chan.recv_stderr_ready() or chan.eof_received or chan.closed):
                data = chan.recv_stderr(1 << 16)
                err += data
                lines("err", data)
                err_open, moved = bool(data), True
            if not moved:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                select.select([chan], [], [], min(left, 1.0))  # readable on data in either stream, EOF or close
        if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError
        return chan.recv_exit_status(), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    finally:
        chan.close()


class _Keys(paramiko.auth_strategy.AuthStrategy):
    """Public-key authentication on one hop, in ssh's order: the hop's identity files (the
    inventory's key, else ssh_config's IdentityFile), then the agent's keys (IdentityAgent, else
    $SSH_AUTH_SOCK; with IdentitiesOnly only those matching an identity file). A key file that
    needs a passphrase is skipped: sparkctl never asks for one, the agent holds it unlocked."""

    def __init__(self, target: SSHTarget, hop: SSHHop):
        super().__init__(ssh_config=None)
        self.target, self.hop = target, hop
        self.locked: list[Path] = []  # passphrase-protected files skipped (named in the error)

    def get_sources(self):
        from paramiko.auth_strategy import InMemoryPrivateKey, OnDiskPrivateKey

        user, wanted = self.hop.user, set()
        for path in self.hop.identity_files:
            try:
                pkey = paramiko.PKey.from_path(path)
            # paramiko says PasswordRequiredException for PEM keys; cryptography's OpenSSH-format
            # loader, which PKey.from_path uses, raises TypeError("Key is password-protected...")
            except (paramiko.PasswordRequiredException, TypeError):
                self.locked.append(path)
                with suppress(Exception):  # the .pub next to it still lets the agent's copy be picked
                    wanted.add(paramiko.PublicBlob.from_file(f"{path}.pub").key_blob)
                continue
            except (OSError, ValueError, paramiko.SSHException) as exc:
                raise UnreachableError(
                    f"{self.target.name}: cannot read SSH key {path}: {exc}",
                    fix="point ssh.key (or IdentityFile in ssh_config) at an OpenSSH private key",
                    reason="key_file",
                ) from None
            wanted.add(pkey.asbytes())
            yield OnDiskPrivateKey(user, "python-config" if path == self.target.key else "ssh-config", str(path), pkey)
        agent = self._agent()
        if agent is None:
            return
        try:
            for key in agent.get_keys():
                if not self.target.identities_only or key.asbytes() in wanted:
                    yield InMemoryPrivateKey(user, key)
        finally:
            agent._close()

    def authenticate(self, transport):
        try:
            return super().authenticate(transport)
        except paramiko.AuthenticationException as exc:
            exc.locked = self.locked  # for the fix: which key to ssh-add
            raise

    def _agent(self):
        import os

        path = self.target.identity_agent or os.environ.get("SSH_AUTH_SOCK")
        if not self.target.agent or not path:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.target.connect_timeout)  # an agent that hangs is a deadline too
        agent = paramiko.agent.AgentSSH()
        try:
            sock.connect(path)
            agent._connect(sock)  # paramiko.Agent() only knows $SSH_AUTH_SOCK; this is its own path
        except (OSError, paramiko.SSHException):
            sock.close()
            return None  # a dangling socket: no agent, as in ssh
        return agent


def _connect_error(label: str, hop: SSHHop, exc: BaseException, t: SSHTarget, through: str = "") -> SparkctlError:
    """sparkctl's message for a failed connection to one hop (`label` names the host, and the
    jump host when it is one; `through`, the jump hosts on the way)."""
    where = f"{hop.user}@{hop.address}:{hop.port}{through}"
    if isinstance(exc, SparkctlError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return hostkeys.describe_bad_host_key(exc, t.known_hosts, label, hop.address, hop.port)
    if isinstance(exc, paramiko.AuthenticationException):
        tried = ", ".join(str(p) for p in hop.identity_files) or "no key file"
        locked = [str(p) for p in getattr(exc, "locked", ())]
        return UnreachableError(
            f"{label}: SSH authentication failed for {where} (offered: {tried}{', the agent' if t.agent else ''})",
            fix=(f"load the passphrase-protected key into the agent: ssh-add {' '.join(locked)}; or " if locked else "")
            + "check ssh.user and ssh.key in the inventory (or User and IdentityFile in ssh_config) and that "
            "the public key is in the host's authorized_keys",
            reason="auth",
        )
    if isinstance(exc, TimeoutError):
        return UnreachableError(
            f"{label}: cannot connect to {where}: no answer within {t.connect_timeout:g} s (management link down or host off?)",
            fix=FIX_REACH,
            reason="timeout",
        )
    if isinstance(exc, paramiko.SSHException):
        # TCP accepted, sshd never spoke: paramiko says "Error reading SSH protocol banner", or
        # "No existing session" when the banner wait ended the transport under the handshake
        if any(w in str(exc).lower() for w in ("banner", "no existing session")):
            return UnreachableError(
                f"{label}: cannot connect to {where}: sshd accepted the connection, then no "
                f"answer within {t.connect_timeout:g} s (sshd frozen or overloaded?)",
                fix=FIX_FROZEN,
                reason="unresponsive",
            )
        return UnreachableError(
            f"{label}: cannot connect to {where}: SSH handshake failed: {exc}", fix=FIX_REACH, reason="handshake"
        )
    # after retries: unreachable
    described = describe(label, exc)
    why = described.message.removeprefix(f"{label}: ")
    reason: UnreachableReason = "dns" if isinstance(exc, socket.gaierror) else getattr(described, "reason", "connect")
    return UnreachableError(f"{label}: cannot connect to {where}: {why}", fix=FIX_REACH, reason=reason)


class _Watchdog(threading.Thread):
    """Asks sshd for a reply every `interval` s; if none comes within `deadline` s, the host is
    declared unresponsive and the connection closed (every call blocked on it then ends)."""

    def __init__(self, session: "HostSession", transport: paramiko.Transport, deadline: float):
        super().__init__(name=f"sparkctl-watchdog-{session.name}", daemon=True)
        self.session = session
        self.transport = transport
        self.deadline = deadline
        self.interval = max(0.5, min(5.0, deadline / 3))
        self.stopped = threading.Event()

    def _ping(self) -> None:
        # OpenSSH answers an unknown global request with a failure: any answer proves life
        with suppress(Exception):
            self.transport.global_request("keepalive@openssh.com", wait=True)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            if not self.transport.is_active():
                return
            probe = threading.Thread(target=self._ping, name=f"{self.name}-ping", daemon=True)
            probe.start()
            probe.join(self.deadline)
            if probe.is_alive():
                # after this process was suspended (a laptop's sleep, SIGSTOP) the deadline has passed
                # with the reply already queued, unread: a moment more reads it; a host that stopped
                # answering is declared that moment later
                probe.join(SUSPEND_GRACE)
            if probe.is_alive() and not self.stopped.is_set():
                self.session._declare_dead(unresponsive(self.session.name, self.deadline), self.transport)
                return


class HostSession:
    """One SSH connection to one host, opened on first use and reused for the whole run."""

    def __init__(self, target: SSHTarget):
        self.target = target
        self.name = target.name
        self._conn: Optional[paramiko.SSHClient] = None
        self._jump_clients: list[paramiko.SSHClient] = []  # the jump hosts' connections, first hop first
        self._docker = None
        self._watchdog: Optional[_Watchdog] = None
        # Set once the host stopped answering: every later call fails at once with this error.
        self.dead: Optional[HostError] = None
        self._early: Optional[threading.Thread] = None  # a connect started ahead (connect_early)
        self._early_done = threading.Event()
        self._early_error: Optional[BaseException] = None
        self._closes = 0  # close() calls: a connect that outlives one keeps nothing open (connect)

    def connect_early(self) -> None:
        """Start connecting in the background, while the caller still imports and plans (the
        handshake waits on sshd). The next connect() waits for it and reports its error: the host
        is tried once, not twice."""
        if self._conn is not None or self._early is not None:
            return

        done = self._early_done = threading.Event()

        def attempt() -> None:
            try:
                self.connect()
            except BaseException as exc:  # noqa: BLE001 - handed to the next connect()
                self._early_error = exc
            finally:
                done.set()

        self._early = threading.Thread(target=attempt, name=f"sparkctl-connect-{self.name}", daemon=True)
        self._early.start()

    # -- connection -----------------------------------------------------------------------

    def _open(self) -> paramiko.SSHClient:
        """One connection attempt, through the jump hosts if any: each hop is its own SSH
        connection with its own host-key check and deadlines, and the next hop's socket is a
        direct-tcpip channel on it (what ssh -J does)."""
        t = self.target
        hops = [*t.jumps, SSHHop(label=t.name, address=t.address, user=t.user, port=t.port, identity_files=t.identity_files)]
        opened: list[paramiko.SSHClient] = []
        sock = None
        try:
            for i, hop in enumerate(hops):
                last = i == len(hops) - 1
                try:
                    opened.append(self._open_hop(hop, sock, jump=not last))
                    if not last:
                        nxt = hops[i + 1]
                        sock = (
                            opened[-1]
                            .get_transport()
                            .open_channel("direct-tcpip", (nxt.address, nxt.port), ("127.0.0.1", 0), timeout=t.connect_timeout)
                        )
                except _JumpFailed:
                    raise
                except Exception as exc:
                    if last:
                        raise
                    # a forward the jump host refused is its answer about the next hop
                    forward = len(opened) == i + 1
                    raise _JumpFailed(hop, exc, hops[i + 1] if forward else None) from exc
        except BaseException:
            for client in reversed(opened):
                client.close()
            raise
        self._jump_clients = opened[:-1]
        return opened[-1]

    def _open_hop(self, hop: SSHHop, sock, jump: bool) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        try:
            label = f"{t.name}: jump host {hop.label}" if jump else t.name
            hostkeys.install_policy(client, t.known_hosts, t.host_key_policy, label)
            client.connect(
                hop.address,
                port=hop.port,
                username=hop.user,
                timeout=max(1, int(t.connect_timeout)),  # TCP connect, then the key exchange
                banner_timeout=t.connect_timeout,
                auth_timeout=t.connect_timeout,
                sock=sock,
                auth_strategy=_Keys(t, hop),
            )
            if sock is None:
                _tune_socket(client.get_transport().sock, t.connect_timeout)
        except BaseException:
            client.close()
            raise
        return client

    @property
    def connected(self) -> bool:
        transport = self._conn.get_transport() if self._conn is not None else None
        return transport is not None and transport.is_active()

    def connect(self) -> "HostSession":
        closes = self._closes
        early = self._early
        if early is not None and early is not threading.current_thread():
            # an Event, not early.join(): Python 3.11's join, broken by Ctrl-C, marks the live thread stopped
            waits.event(self._early_done)
            self._early = None
            if self._early_error is not None:
                error, self._early_error = self._early_error, None
                raise error
        if self.dead is not None:
            raise self.dead
        if self.connected:
            return self
        t = self.target
        from sparkctl.inventory.control import key_file_problem
        from sparkctl.transport.guard import check_address

        for hop in t.jumps:  # every hop's address, a name only ssh_config gives included
            check_address(hop.address, f"SSH to {t.name} through jump host {hop.label}")
        check_address(t.address, f"SSH to {t.name}")
        # the CLI said so before connecting (exit 2); a target built in code meets it here
        if t.key is not None and (bad := key_file_problem(t.key)) is not None:
            raise UnreachableError(f"{t.name}: {bad.message}", fix=bad.fix, reason="key_file")

        retrying = Retrying(
            retry=retry_if_exception(_is_transient),
            stop=stop_after_attempt(CONNECT_ATTEMPTS) | stop_after_delay(t.connect_timeout),
            wait=wait_exponential(multiplier=0.2, max=2),
            reraise=True,
        )
        try:
            self._conn = retrying(self._open)
        except _JumpFailed as failed:
            hop = failed.hop
            if failed.forward_to is not None:  # the jump host answered, the next hop did not
                nxt = failed.forward_to
                raise UnreachableError(
                    f"{t.name}: jump host {hop.label} could not reach {nxt.address}:{nxt.port}: {failed.error}",
                    fix=f"check that {nxt.address} is up and its sshd reachable from {hop.label} "
                    f"(from {hop.label}: nc -zv {nxt.address} {nxt.port})",
                    reason="jump",
                ) from None
            raise _connect_error(f"{t.name}: jump host {hop.label}", hop, failed.error, t) from None
        except Exception as exc:
            hop = SSHHop(label=t.name, address=t.address, user=t.user, port=t.port, identity_files=t.identity_files)
            through = f" (through {', '.join(h.label for h in t.jumps)})" if t.jumps else ""
            raise _connect_error(t.name, hop, exc, t, through) from None
        if closes != self._closes:  # the run closed this session meanwhile (Ctrl-C): nothing outlives it
            self.close()  # (close counts before it reads _conn: one of the two closes this connection)
            raise UnreachableError(f"{t.name}: the SSH session was closed while it connected", reason="lost")
        # through jump hosts, the keepalives cross them: a bastion that stops answering is seen too
        transport = self._conn.get_transport()
        self._watchdog = _Watchdog(self, transport, t.connect_timeout)
        self._watchdog.start()
        return self

    def _declare_dead(self, error: HostError, transport: Optional[paramiko.Transport] = None) -> None:
        """The host stopped answering: remember why, and break the connection so blocked calls end."""
        if self.dead is None:
            self.dead = error
        transport = transport or (self._conn.get_transport() if self._conn is not None else None)
        if transport is None:
            return
        # shutdown wakes threads blocked on the socket; close would not. Through jump hosts, the
        # socket that carries it all is the first jump host's.
        for sock in [transport.sock, *(c.get_transport().sock for c in self._jump_clients if c.get_transport())]:
            with suppress(OSError, AttributeError):
                sock.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=transport.close, name=f"sparkctl-close-{self.name}", daemon=True).start()

    def _lost(self, exc: BaseException) -> SparkctlError:
        """An error mid-call: when it broke the connection, the host stays failed for the run
        (reconnecting to a host that just vanished would cost a connect timeout per call)."""
        err = self.explain(exc)
        transport = self._conn.get_transport() if self._conn is not None else None
        if self.dead is None and isinstance(err, HostError) and (transport is None or not transport.is_active()):
            self.dead = err
        return err

    def explain(self, exc: BaseException) -> SparkctlError:
        """sparkctl's message for an error met while working on this host (the watchdog's verdict
        first: a frozen host surfaces as whatever the blocked library call happened to raise)."""
        if self.dead is not None:
            return self.dead
        return describe(self.name, exc)

    @property
    def paramiko_client(self) -> paramiko.SSHClient:
        self.connect()
        assert self._conn is not None
        return self._conn

    def close(self) -> None:
        # Never waits for a connect under way (connect_early's, a Fleet.map worker's): against a host
        # that never answers that is the connect timeout, and close runs as Ctrl-C unwinds the run.
        # Such a connect closes what it opened when it ends (connect).
        self._closes += 1
        self._early = None
        if self._watchdog is not None:
            self._watchdog.stopped.set()
            self._watchdog = None
        if self._docker is not None:
            with suppress(Exception):
                self._docker.close()
            self._docker = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        for client in reversed(self._jump_clients):  # after the connection they carry
            client.close()
        self._jump_clients = []

    # -- commands -------------------------------------------------------------------------

    @property
    def timeout(self) -> float:
        """Seconds a command may take unless its caller says otherwise (inventory `ssh.timeout`)."""
        return self.target.timeout

    def transfer_timeout(self, nbytes: float) -> float:
        """A deadline for a command that moves `nbytes` (a copy, an image load): ssh.timeout plus
        the time it takes at MIN_TRANSFER_RATE, the slowest a healthy disk or link goes."""
        return self.timeout + max(0.0, nbytes) / MIN_TRANSFER_RATE

    def run(
        self,
        command: str | list[str],
        timeout: Optional[float] = None,
        *,
        stdin: Optional[bytes] = None,
        on_line: Optional[Callable[[str], None]] = None,
    ) -> CommandResult:
        """Run a command; return its result (non-zero exit is data, not an exception).

        A list is shell-quoted. Never retried: it may have changed state before failing.
        `timeout` defaults to the inventory's ssh.timeout; pass a longer one for long operations
        (copies, transfers). A host that stops answering fails the call within the connect timeout.
        `stdin` is sent to the command (secrets: never in a command line); `on_line` sees each
        output line as it comes (a transfer's progress).
        """
        cmd = command if isinstance(command, str) else shlex.join(command)
        timeout = self.timeout if timeout is None else timeout
        client = self.paramiko_client
        start = time.monotonic()
        try:
            code, out, err = _exec(client.get_transport(), cmd, start + timeout, stdin, on_line)
        except TimeoutError:
            if self.dead is not None:
                raise self.dead from None
            raise HostError(
                f"{self.name}: command did not finish within {timeout:g} s: {redact(cmd)[:200]}",
                fix="the host answers but the command hangs: look at it on the host (ps, dmesg); "
                "if it is only slow, raise ssh.timeout in the inventory",
            ) from None
        except Exception as exc:  # connection lost mid-command, or the watchdog closed it
            lost = self._lost(exc)
            raise lost.reworded(f"{lost.message} (while running {redact(cmd)[:160]})") from None
        if self.dead is not None:  # the watchdog closed the channel: the exit code means nothing
            raise self.dead.reworded(f"{self.dead.message} (while running {redact(cmd)[:160]})")
        if code == -1 and not self.connected:
            raise UnreachableError(
                f"{self.name}: the SSH connection was lost while running {redact(cmd)[:160]}", fix=FIX_REACH, reason="lost"
            )
        return CommandResult(self.name, cmd, code, out, err, time.monotonic() - start)

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a file on the host atomically (temp file + rename) over SFTP, within ssh.timeout."""
        try:
            sftp = self.paramiko_client.open_sftp()
            sftp.get_channel().settimeout(self.timeout)
            try:
                tmp = f"{remote_path}.sparkctl-tmp"
                with sftp.open(tmp, "wb") as f:
                    f.write(data)
                sftp.chmod(tmp, mode)
                sftp.posix_rename(tmp, remote_path)
            finally:
                sftp.close()
        except SparkctlError:
            raise
        except Exception as exc:
            err = self._lost(exc)
            raise err.reworded(f"{err.message} (while writing {remote_path})") from None

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
    error: Optional[str] = None  # the failure's message, redacted
    fix: Optional[str] = None
    seconds: float = 0.0
    failure: Optional[SparkctlError] = None  # the error itself (its class, reason), for callers that branch on it

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

    def connect_early(self) -> "Fleet":
        """Start every host's connection in the background (see HostSession.connect_early)."""
        for s in self.sessions.values():
            s.connect_early()
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
            except Exception as exc:  # library errors become sparkctl's message for this host
                err = exc if isinstance(exc, SparkctlError) else self.sessions[name].explain(exc)
                return Outcome(name, error=redact(err.message), fix=err.fix, seconds=time.monotonic() - start, failure=err)

        def run(fut: Future, name: str) -> None:
            try:
                fut.set_result(one(name))
            except BaseException as exc:  # noqa: BLE001 - raised in the caller, as a pool would
                fut.set_exception(exc)

        # A daemon thread per host, not a pool: Python joins a pool's threads when it exits, so a
        # host that never answers held a run ended by Ctrl-C for its connect timeout. Waiting on
        # the futures is what Ctrl-C breaks; the threads' sessions are closed by their owner.
        futures: dict[Future, str] = {}
        for n in names:
            fut: Future = Future()
            futures[fut] = n
            threading.Thread(target=run, args=(fut, n), name=f"sparkctl-host-{n}", daemon=True).start()
        done, pending = waits.futures(futures, timeout=timeout)
        for fut in pending:
            name = futures[fut]
            err = unresponsive(name, timeout or 0.0)
            results[name] = Outcome(name, error=err.message, fix=err.fix, seconds=timeout or 0.0, failure=err)
            self.sessions[name]._declare_dead(err)  # unblock the stuck thread's socket
        for fut in done:
            results[futures[fut]] = fut.result()
        return {n: results[n] for n in names}
