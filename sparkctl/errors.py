"""Errors an operator can cause or meet, each with the exit code and the fix to print.

The CLI turns these into one clear message and an exit code, never a traceback:
2 bad input or usage, 1 a check or step failed, 130 interrupted.
"""

from __future__ import annotations

import copy
from typing import Literal


class SparkctlError(Exception):
    """An error reported to the operator as a message (and a fix), not a traceback."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def to_dict(self) -> dict:
        return {"error": self.message, "fix": self.fix, "exit_code": self.exit_code}

    def reworded(self, message: str) -> "SparkctlError":
        """The same error (its class, fix and every other attribute) with another message."""
        err = copy.copy(self)
        err.args, err.message = (message,), message
        return err


class InputError(SparkctlError):
    """Bad input: a wrong inventory, option or file. Nothing was touched."""

    exit_code = 2


class Interrupted(SparkctlError):
    """Ctrl-C (or SIGTERM/SIGHUP, which a cluster-changing command takes as one: lock.py) ended the
    command, after everything it holds was let go (the cluster lock released, SSH closed)."""

    exit_code = 130  # 128 + SIGINT: what a shell reports for a process Ctrl-C ended

    def __init__(self, cause: str = ""):  # e.g. "signal 15": a SIGTERM taken as Ctrl-C (lock.py)
        super().__init__(f"interrupted ({cause})" if cause else "interrupted")


class HostError(SparkctlError):
    """A host could not be reached or refused us (SSH, host key, Docker)."""


# Why SSH to a host failed, as the transport knows it: what a program branches on (doctor's
# ssh.host_key, the cluster session), never the words of the message.
UnreachableReason = Literal[
    "refused",  # the TCP connection was refused: sshd not running, or the wrong port
    "timeout",  # no answer within the connect timeout (link down, host off)
    "unresponsive",  # sshd accepted, or an open connection, then stopped answering (sshd frozen, link lost)
    "no_route",  # no route to the host, network unreachable
    "dns",  # the host's name does not resolve
    "handshake",  # the SSH handshake failed (no common algorithm, protocol error)
    "auth",  # authentication failed: no key offered was accepted
    "host_key",  # the host's key is refused: changed, or unknown under the strict policy
    "known_hosts",  # known_hosts cannot be read
    "key_file",  # the SSH key file is missing or unreadable
    "jump",  # a jump host could not reach the next hop
    "session",  # sshd refused to open a session (MaxSessions, load)
    "lost",  # the connection broke (reset, EOF) while in use
    "connect",  # the connection failed for another reason (the message says which)
]


class UnreachableError(HostError):
    """SSH to the host failed: no connection, a refused or changed host key, authentication, or a
    host that stopped answering. An ssh/preflight failure, whichever step happened to meet it."""

    def __init__(self, message: str, fix: str | None = None, reason: UnreachableReason = "connect"):
        super().__init__(message, fix)
        self.reason: UnreachableReason = reason
