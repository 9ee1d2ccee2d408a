"""Errors an operator can cause or meet, each with the exit code and the fix to print.

The CLI turns these into one clear message and an exit code, never a traceback:
2 bad input or usage, 1 a check or step failed.
"""

from __future__ import annotations


class SparkctlError(Exception):
    """An error reported to the operator as a message (and a fix), not a traceback."""

    exit_code = 1

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def to_dict(self) -> dict:
        return {"error": self.message, "fix": self.fix, "exit_code": self.exit_code}


class InputError(SparkctlError):
    """Bad input: a wrong inventory, option or file. Nothing was touched."""

    exit_code = 2


class HostError(SparkctlError):
    """A host could not be reached or refused us (SSH, host key, Docker)."""


class UnreachableError(HostError):
    """SSH to the host failed: no connection, a refused or changed host key, authentication, or a
    host that stopped answering. An ssh/preflight failure, whichever step happened to meet it."""
