"""Raw library errors reach the operator as sparkctl's own messages: the host, what happened, a fix.

The exceptions are the libraries' own (paramiko, docker-py, socket), built as those libraries
raise them, never a class name or "[Errno None]" alone."""

from __future__ import annotations

import errno
import socket

import docker.errors
import paramiko
import pytest
import requests

from sparkctl.errors import HostError
from sparkctl.transport.failures import describe, unresponsive

RAW = ("NoValidConnectionsError", "SSHException", "APIError", "[Errno None]", "EOFError", "Traceback")


def _no_raw(err: HostError) -> None:
    assert not any(r in err.message for r in RAW), err.message
    assert err.fix


def _api_error(status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    response._content = text.encode()
    return docker.errors.APIError(text, response=response, explanation=text)


def test_409_from_the_engine_names_the_host_and_a_concurrent_run():
    raw = _api_error(409, "container 4f2c is dead or marked for removal")
    err = describe("worker", raw)
    assert err.message.startswith("worker: ")
    assert "dead or marked for removal" in err.message
    assert "another sparkctl run" in err.fix
    _no_raw(err)


def test_no_valid_connections_is_refused_or_no_route():
    refused = paramiko.ssh_exception.NoValidConnectionsError(
        {("10.231.0.12", 22): ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")}
    )
    err = describe("worker", refused)
    assert err.message == "worker: cannot reach sshd: connection refused (sshd not running or wrong port?)"
    _no_raw(err)
    unreachable = paramiko.ssh_exception.NoValidConnectionsError(
        {("10.231.0.12", 22): OSError(errno.EHOSTUNREACH, "No route to host")}
    )
    assert "no route" in describe("worker", unreachable).message


@pytest.mark.parametrize(
    "raw",
    [paramiko.SSHException("No existing session"), EOFError(), ConnectionResetError(errno.ECONNRESET, "reset")],
)
def test_lost_connections(raw):
    err = describe("head", raw)
    assert err.message.startswith("head: ") and ("lost" in err.message)
    _no_raw(err)


def test_timeouts_say_no_answer():
    err = describe("offload", socket.timeout("timed out"))
    assert err.message.startswith("offload: no answer in time")
    _no_raw(err)
    assert unresponsive("worker", 10).message == "worker: no answer within 10 s (management link down or sshd frozen?)"


def test_docker_connection_error_and_not_found():
    err = describe("head", requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected())"))
    assert err.message == "head: lost the connection to the Docker Engine over SSH"
    nf = docker.errors.NotFound("404", response=None, explanation="No such container: sparkctl-lab-head")
    assert "No such container: sparkctl-lab-head" in describe("head", nf).message


def test_host_key_failures_are_ssh_failures():
    expected = paramiko.RSAKey.generate(1024)
    offered = paramiko.RSAKey.generate(1024)
    err = describe("worker", paramiko.BadHostKeyException("10.231.0.12", offered, expected))
    assert "SSH host key does not match" in err.message and "known_hosts" in err.fix


def test_sparkctl_errors_pass_through_unchanged():
    mine = HostError("worker: already explained", fix="x")
    assert describe("worker", mine) is mine


def test_ssh_failures_are_unreachable_docker_failures_are_not():
    from sparkctl.errors import UnreachableError

    ssh_side = [
        paramiko.BadHostKeyException("h", paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)),
        paramiko.AuthenticationException("denied"),
        paramiko.SSHException("No existing session"),
        socket.timeout("timed out"),
        unresponsive("worker", 10),
    ]
    for raw in ssh_side:
        assert isinstance(describe("worker", raw), UnreachableError), raw
    assert not isinstance(describe("worker", _api_error(409, "conflict")), UnreachableError)


def test_transfer_deadline_grows_with_the_size():
    from pathlib import Path

    from sparkctl.inventory.models import SSHTarget
    from sparkctl.transport.ssh import MIN_TRANSFER_RATE, HostSession

    target = SSHTarget(
        name="offload",
        address="10.231.0.13",
        user="root",
        port=22,
        key=None,
        known_hosts=Path("/nonexistent"),
        host_key_policy="strict",
        connect_timeout=10,
        timeout=60,
    )
    s = HostSession(target)
    assert s.transfer_timeout(0) == 60
    assert s.transfer_timeout(300 * 2**30) == 60 + 300 * 2**30 / MIN_TRANSFER_RATE  # 300 GiB of Engram tables
