"""Bad options and out-of-bounds values an operator or a script can type (issue 24, item 6): each is a
clear error naming the option or key and the fix, exit 2, no traceback, one JSON document with --json,
and nothing written or contacted. Every case here gave a traceback, a raw library message or was
accepted before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from climain import run

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventories" / "lab.yaml"
NOWHERE = "http://127.0.0.1:9/v1"  # loopback, nothing listens: a bad option must be refused before any request


def refused(argv: list[str], capsys, *words: str) -> dict:
    """Exit 2 with every word in the message or fix, in human output and as one JSON document."""
    code, out, err = run(argv, capsys)
    assert code == 2, out + err
    text = " ".join((out + err).split())
    assert text.startswith("error:") and "fix:" in text, text
    for w in words:
        assert w in text, (w, text)
    code, out, _ = run([*argv, "--json"], capsys)
    doc = json.loads(out)  # exactly one document
    assert code == 2 and doc["exit_code"] == 2 and doc["fix"]
    return doc


def test_alerts_out_into_a_missing_folder(tmp_path, capsys):
    target = tmp_path / "nonexistent-dir" / "rules.yml"
    refused(["alerts", "-i", str(LAB), "--out", str(target)], capsys, f"--out {target}", "does not exist", "mkdir -p")
    assert not target.parent.exists()


def test_alerts_out_a_directory(tmp_path, capsys):
    doc = refused(["alerts", "-i", str(LAB), "--out", str(tmp_path)], capsys, "is a directory")
    assert doc["error"] == f"--out {tmp_path} is a directory"
    assert list(tmp_path.iterdir()) == []


def test_alerts_writes_neither_file_when_one_cannot_be_written(tmp_path, capsys):
    rules = tmp_path / "rules.yml"
    refused(["alerts", "-i", str(LAB), "--out", str(rules), "--prometheus-config", str(tmp_path / "no" / "p.yml")],
            capsys, "--prometheus-config", "does not exist")  # fmt: skip
    assert not rules.exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--parts", "everything"], ["--parts 'everything'", "throughput, context, prefill, mixed"]),
        (["--parts", "throughput,mixd"], ["--parts 'mixd'", "must be one of"]),
        (["--streams", "a"], ["--streams 'a'", "number of concurrent streams", "--streams 1,4"]),
        (["--streams", "0"], ["'0' is not a number of concurrent streams"]),
        (["--streams", "4k"], ["'4k' is not a number of concurrent streams"]),
        (["--workloads", "poetry"], ["--workloads 'poetry'", "unknown workload"]),
        (["--timeout", "nan"], ["--timeout nan", "seconds from 1", "--timeout 1800"]),
        (["--timeout", "inf"], ["--timeout inf"]),
        (["--mixed-delay", "inf"], ["--mixed-delay inf", "from 0 to 600"]),
    ],
)
def test_bench_options(args, words, capsys):
    refused(["bench", "--endpoint", NOWHERE, *args], capsys, *words)


def test_status_endpoint_needs_a_url_with_a_port(capsys):
    # it was read as http://notaurl:80
    refused(["status", "--endpoint", "notaurl"], capsys, "--endpoint 'notaurl' is not http://HOST:PORT", "http://10.0.0.5:8000")
    refused(["status", "--endpoint", "http://127.0.0.1"], capsys, "is not http://HOST:PORT (with the port)")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["status", "--endpoint", "http://127.0.0.1:9", "--sample", "-1"], ["--sample -1", "from 0.2 to 60"]),
        (["status", "--endpoint", "http://127.0.0.1:9", "--sample", "nan"], ["--sample nan"]),
        (["status", "--endpoint", "http://127.0.0.1:9", "--interval", "nan"], ["--interval nan"]),
        (["up", "-i", str(LAB), "--check", "--timeout", "nan"], ["--timeout nan", "--timeout 1800"]),
        (["reload", "-i", str(LAB), "--config", str(LAB), "--check", "--deadline", "-5"], ["--deadline -5", "from 1 to 86400"]),
        (["restart", "-i", str(LAB), "--check", "--deadline", "inf"], ["--deadline inf"]),
        (["down", "-i", str(LAB), "--check", "--drain", "-5"], ["--drain -5", "from 0 to 3600"]),
    ],
)
def test_durations_are_bounded(argv, words, capsys):
    refused(argv, capsys, *words)


# --- the inventory -----------------------------------------------------------------------------


def write(tmp_path, edit) -> Path:
    doc = yaml.safe_load(LAB.read_text())
    edit(doc)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("image", "10.231.0.1:5000/sparkctl/vllm-sim:0.1; rm -rf /", ["runtime.image", "is not an image reference", "' ', ';'"]),
        ("image", "registry.local/Team/vllm:1", ["runtime.image", "must be lower case"]),
        ("image", "vllm:", ["runtime.image", "[registry[:port]/]path[:tag][@digest]"]),
        ("shutdown_timeout", 100000000000, ["runtime.shutdown_timeout", "<= 3600"]),
        ("shutdown_timeout", 1e20, ["runtime.shutdown_timeout", "usable size"]),
        ("gpu_memory_utilization", float("nan"), ["runtime.gpu_memory_utilization", "not .nan or .inf"]),
    ],
)
def test_inventory_bounds(tmp_path, capsys, key, value, words):
    path = write(tmp_path, lambda d: d["runtime"].__setitem__(key, value))
    refused(["inventory", "validate", str(path)], capsys, f"{path}:", *words)


def test_a_problem_on_line_100_says_100(tmp_path, capsys):
    # rich read "inv.yaml:100:" as the emoji code :100:
    lines = LAB.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  image:"))
    path = tmp_path / "inv.yaml"
    path.write_text("\n".join(["# padding"] * (99 - at) + lines[:at] + ["  image: 'bad image'"] + lines[at + 1 :]) + "\n")
    refused(["inventory", "validate", str(path)], capsys, f"{path}:100: runtime.image")


def test_drafter_image_is_a_reference_too(tmp_path, capsys):
    path = write(tmp_path, lambda d: d["runtime"]["speculative"].__setitem__("drafter_image", "my drafter"))
    refused(["inventory", "validate", str(path)], capsys, "runtime.speculative.drafter_image", "' '")


def test_ssh_timeouts_are_finite(tmp_path, capsys):
    path = write(tmp_path, lambda d: d["ssh_defaults"].__setitem__("connect_timeout", float("inf")))
    refused(["inventory", "validate", str(path)], capsys, "ssh_defaults.connect_timeout", "finite")


# References docker pulls: distribution/reference's own test cases (reference_test.go) and the ones
# the seeds and the lab use.
VALID = [
    "test_com",
    "test.com:tag",
    "test.com:5000",
    "test.com/repo:tag",
    "test:5000/repo",
    "test:5000/repo:tag",
    "lowercase:Uppercase",
    "sub-dom1.foo.com/bar/baz/quux",
    "sub-dom1.foo.com/bar/baz/quux:some-long-tag",
    "b.gcr.io/test.example.com/my-app:test.example.com",
    "xn--n3h.com/myimage:xn--n3h.com",
    "foo_bar.com:8080",
    "foo/foo_bar.com:8080",
    "Uppercase.com/lowercase:tag",
    "[::1]:5000/repo",
    "localhost:5000/a__b/c---d:1.0",
    "nvcr.io/nvidia/vllm:25.09-py3",
    "10.231.0.1:5000/sparkctl/vllm-sim:0.1",
    "test:5000/repo@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
]
INVALID = [
    "",
    ":justtag",
    "@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "repo@sha256:ffffff",
    "validname@invaliddigest:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "Uppercase:tag",
    "repo@sha256:" + "f" * 32,
    "test:5000/Uppercase/lowercase:tag",
    "aa/asdf$$^/aa",
    "a b",
    "vllm;reboot",
    "-vllm",
    "vllm:tag with space",
    "a" * 256,
]


@pytest.mark.parametrize("ref", VALID)
def test_valid_references(ref):
    from sparkctl.inventory.image_ref import problem

    assert problem(ref) is None


@pytest.mark.parametrize("ref", INVALID)
def test_invalid_references(ref):
    from sparkctl.inventory.image_ref import problem

    assert problem(ref)
