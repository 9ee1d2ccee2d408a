"""Raw library errors (paramiko, socket, docker, requests) as sparkctl's own messages: the host,
what went wrong in words an operator can act on, and the fix.

`describe(host, exc)` never returns a class name or a library's internal phrase alone
("NoValidConnectionsError: [Errno None]", "SSHException: No existing session", "APIError: 409");
the original text is kept after the explanation only when it adds something.
"""

from __future__ import annotations

import errno

import paramiko

from sparkctl.errors import HostError, SparkctlError, UnreachableError, UnreachableReason
from sparkctl.transport.redact import redact

FIX_REACH = "check the host is up, its management link and sshd (`sparkctl doctor --only ssh`), then rerun"
FIX_FROZEN = (
    "check the host's management link (cable, switch port, `ip link`) and that sshd answers (`ssh HOST true`); rerun once it does"
)


def unresponsive(host: str, seconds: float) -> UnreachableError:
    """The host stopped answering on an open SSH connection (keepalives unanswered)."""
    return UnreachableError(
        f"{host}: no answer within {seconds:g} s (management link down or sshd frozen?)", fix=FIX_FROZEN, reason="unresponsive"
    )


def _docker_error(host: str, exc: BaseException) -> HostError | None:
    import docker.errors  # imported on first failure: docker-py costs 0.1 s of a no-op `up`
    import requests.exceptions

    if isinstance(exc, docker.errors.NotFound):
        return HostError(
            f"{host}: Docker Engine: not found: {redact(_explanation(exc))}",
            fix="something removed it meanwhile (another sparkctl run or a manual docker command?); rerun `sparkctl up`",
        )
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code
        text = redact(_explanation(exc))
        if code == 409:
            return HostError(
                f"{host}: Docker Engine refused a container change as conflicting with another one in progress ({text})",
                fix="another sparkctl run or docker command is changing this host's containers: let it finish "
                "(`sparkctl up` takes the cluster lock), then rerun",
            )
        return HostError(
            f"{host}: Docker Engine answered HTTP {code}: {text}",
            fix="check the engine on the host (`docker info`, `journalctl -u docker`), then rerun",
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return HostError(f"{host}: Docker Engine did not answer in time ({redact(str(exc))[:200]})", fix=FIX_FROZEN)
    if isinstance(exc, requests.exceptions.ConnectionError):
        return HostError(f"{host}: lost the connection to the Docker Engine over SSH", fix=FIX_REACH)
    if isinstance(exc, docker.errors.DockerException):
        return HostError(f"{host}: Docker Engine: {redact(str(exc))[:300]}", fix="check dockerd on the host")
    return None


def _explanation(exc) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def describe(host: str, exc: BaseException) -> SparkctlError:
    """The operator's message for any error met while talking to `host`."""
    if isinstance(exc, SparkctlError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return UnreachableError(
            f"{host}: SSH host key does not match known_hosts (refused: this is what a man-in-the-middle looks like)",
            fix="verify the host's key out of band, then update known_hosts (ssh-keygen -R) and rerun",
            reason="host_key",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return UnreachableError(
            f"{host}: SSH authentication failed",
            fix="check ssh.user and ssh.key in the inventory and the host's authorized_keys",
            reason="auth",
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {e.errno for e in exc.errors.values() if isinstance(e, OSError)}
        refused = errno.ECONNREFUSED in codes
        why = "connection refused (sshd not running or wrong port?)" if refused else "no route to it"
        return UnreachableError(f"{host}: cannot reach sshd: {why}", fix=FIX_REACH, reason="refused" if refused else "no_route")
    if isinstance(exc, TimeoutError):
        return UnreachableError(
            f"{host}: no answer in time (management link down or host overloaded?)", fix=FIX_FROZEN, reason="timeout"
        )
    if isinstance(exc, paramiko.ChannelException):
        return UnreachableError(
            f"{host}: sshd refused to open a session ({exc.text})",
            fix="check sshd's MaxSessions and load on the host",
            reason="session",
        )
    if isinstance(exc, (paramiko.SSHException, EOFError)):
        why = redact(str(exc))
        return UnreachableError(
            f"{host}: the SSH connection was lost" + (f" ({why})" if why else ""), fix=FIX_REACH, reason="lost"
        )
    docker_err = _docker_error(host, exc)
    if docker_err is not None:
        return docker_err
    if isinstance(exc, ConnectionError):
        reason: UnreachableReason = "refused" if isinstance(exc, ConnectionRefusedError) else "lost"
        return UnreachableError(f"{host}: connection lost ({exc.strerror or exc})", fix=FIX_REACH, reason=reason)
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT):
        reason = "timeout" if exc.errno == errno.ETIMEDOUT else "no_route"
        return UnreachableError(f"{host}: {exc.strerror} (management link down?)", fix=FIX_REACH, reason=reason)
    return HostError(f"{host}: {type(exc).__name__}: {redact(str(exc))[:300]}")
