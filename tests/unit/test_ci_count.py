""".ci/count_tests.py: CI fails when the suite ran fewer tests than .ci/test-count records, counting
every junit report given (./dev.sh test writes one for tests/unit and one for tests/lab)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "count_tests.py"


def junit(path: Path, passed: int, skipped: int = 0) -> Path:
    cases = "".join(f'<testcase classname="t" name="ok{i}" time="0.1"/>' for i in range(passed))
    cases += "".join(f'<testcase classname="t" name="sk{i}"><skipped message="no"/></testcase>' for i in range(skipped))
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


def count(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=30)


def test_both_reports_are_counted_against_the_recorded_minimum(tmp_path):
    (tmp_path / "count").write_text("5\n")
    unit, lab = junit(tmp_path / "unit.xml", 3, skipped=2), junit(tmp_path / "lab.xml", 2)
    ok = count(unit, lab, tmp_path / "count")
    assert ok.returncode == 0 and "5 tests ran (recorded minimum 5)" in ok.stdout
    short = count(unit, tmp_path / "count")  # the lab's report left out: 3 < 5 (skipped ones do not count)
    assert short.returncode == 1 and "ran 3 tests, fewer than the 5 recorded" in short.stderr


def test_a_missing_report_fails_naming_it(tmp_path):
    (tmp_path / "count").write_text("1\n")
    r = count(junit(tmp_path / "unit.xml", 3), tmp_path / "lab.xml", tmp_path / "count")
    assert r.returncode == 1 and f"no test report {tmp_path / 'lab.xml'}" in r.stderr and "Traceback" not in r.stderr
