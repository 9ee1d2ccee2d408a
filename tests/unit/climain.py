"""Running `sparkctl` in-process as a script would, for tests of what it prints and its exit code."""

from __future__ import annotations

import pytest

from sparkctl.cli.app import main


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one command; never a traceback."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return exc.value.code, out, err
