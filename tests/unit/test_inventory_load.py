"""Loading is safe: hostile or broken files fail fast with InputError (exit 2), naming file and line."""

from __future__ import annotations

from pathlib import Path

import clirun
import pytest

from sparkctl.errors import InputError
from sparkctl.inventory.loader import MAX_BYTES, load_inventory

REPO = Path(__file__).resolve().parents[2]
LAB = (REPO / "inventories" / "lab.yaml").read_text()


def refused(path) -> InputError:
    with pytest.raises(InputError) as exc:
        load_inventory(path)
    assert exc.value.exit_code == 2
    assert str(path) in exc.value.message
    return exc.value


def test_source_is_the_file(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(LAB)
    inv = load_inventory(path)
    assert inv.source == path
    assert inv.cluster.name == "lab"


def test_python_tag_never_constructs_anything(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "tag.yaml"
    path.write_text(LAB + f"\nextra: !!python/object/apply:os.system ['touch {marker}']\n")
    err = refused(path)
    assert "!!python/object/apply:os.system is not allowed" in err.message
    assert f"{path}:{LAB.count(chr(10)) + 2}:" in err.message  # file:line:col of the tag
    assert not marker.exists()


@pytest.mark.parametrize(
    "snippet, tag",
    [
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!include secrets.yaml", "!include"),
        ("!!binary aGVsbG8=", "!!binary"),
        ("!!set {a, b}", "!!set"),
        ("!!omap [a: 1]", "!!omap"),
    ],
)
def test_every_non_plain_tag_is_refused(tmp_path, snippet, tag):
    path = tmp_path / "tag.yaml"
    path.write_text(f"cluster: {{name: x}}\nvalue: {snippet}\n")
    assert f"YAML tag {tag} is not allowed" in refused(path).message


def test_billion_laughs_fails_cleanly(tmp_path):
    # 9 levels of 9 aliases: 9^9 = 387 million strings once expanded, from 600 bytes.
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    err = refused(path)
    assert "alias bomb" in err.message


def test_alias_bomb_hidden_in_a_valid_key_fails_before_validation(tmp_path):
    bomb = "".join(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 9) + "]\n" for i in range(1, 8))
    path = tmp_path / "bomb.yaml"
    path.write_text("x0: &x0 [a, a, a, a, a, a, a, a, a]\n" + bomb + "cluster: {name: *x7}\n")
    assert "alias bomb" in refused(path).message


def test_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("cluster: &c {name: lab, self: *c}\n")
    assert "recursive alias" in refused(path).message


def test_deep_nesting_is_refused_without_exhausting_the_stack(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 200_000)
    assert "nested deeper than" in refused(path).message


def test_too_many_values_stop_early(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text("x: [" + "1, " * 100_000 + "]\n")
    assert "more than" in refused(path).message


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:  # sparse: 64 GiB that would take minutes to read
        f.truncate(64 * 1024**3)
    err = refused(path)
    assert f"larger than {MAX_BYTES // 1024} KiB" in err.message


def test_device_is_refused_before_reading():
    err = refused(Path("/dev/zero"))  # reports size 0, never ends
    assert "is a character device, not an inventory file" in err.message


def test_fifo_is_refused_without_blocking(tmp_path):
    import os
    import threading

    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    outcome = {}

    def load():  # a thread: if loading opened the FIFO for reading it would block with no writer
        try:
            load_inventory(fifo)
        except InputError as exc:
            outcome["err"] = exc

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the reader so the test process can end, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("loading a FIFO blocked")
    assert "is a FIFO (named pipe), not an inventory file" in outcome["err"].message
    assert outcome["err"].exit_code == 2


def test_fifo_via_cli_exits_2(tmp_path):
    import os

    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    r = clirun.sparkctl(["inventory", "validate", str(fifo)], timeout=60)
    assert r.returncode == 2
    assert "FIFO" in r.stderr and "Traceback" not in r.stderr


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"cluster:\n  name: \x00\x01\x02\xff")
    assert "binary (NUL byte at offset" in refused(path).message


def test_non_utf8_is_refused_with_the_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("cluster:\n  name: caf\xe9\n".encode("latin-1"))
    err = refused(path)
    assert f"{path}:2:" in err.message and "not UTF-8" in err.message


def test_control_characters_are_refused(tmp_path):
    path = tmp_path / "ctrl.yaml"
    path.write_text('cluster:\n  name: "a\x07b"\n')
    assert "control character #x0007" in refused(path).message


def test_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "syntax.yaml"
    path.write_text(LAB.replace("cluster:\n  name: lab", "cluster:\n  name: [lab"))
    err = refused(path)
    assert "YAML syntax" in err.message
    assert f"{path}:10:13:" in err.message


def test_tab_indentation_is_a_syntax_error_with_position(tmp_path):
    path = tmp_path / "tabs.yaml"
    path.write_text("cluster:\n\tname: lab\n")
    err = refused(path)
    assert f"{path}:2:1:" in err.message


def test_duplicate_key_is_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(LAB.replace("  port: 8888\n", "  port: 8888\n  port: 9999\n"))
    err = refused(path)
    assert "key 'port' is written twice" in err.message


def test_duplicate_host_is_refused(tmp_path):
    path = tmp_path / "dup-host.yaml"
    path.write_text(LAB.replace("  offload:\n    role: offload", "  worker:\n    role: offload"))
    assert "key 'worker' is written twice" in refused(path).message


def test_several_documents_are_refused(tmp_path):
    path = tmp_path / "multi.yaml"
    path.write_text(LAB + "---\ncluster: {name: other}\n")
    assert "single document" in refused(path).message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n")
    assert "is empty" in refused(path).message


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- head\n- worker\n")
    assert "top level must be a mapping" in refused(path).message


def test_missing_file():
    with pytest.raises(InputError) as exc:
        load_inventory(Path("/nonexistent/cluster.yaml"))
    assert "does not exist" in exc.value.message and exc.value.fix


def test_directory(tmp_path):
    assert "is a directory" in refused(tmp_path).message


def test_anchors_and_merge_keys_still_work(tmp_path):
    """Plain reuse is not an attack: a fabric default merged into each link validates."""
    text = LAB.replace(
        "hosts:\n",
        "hosts:\n",
    ).replace(
        "      - device: enp1s0f0np0\n        rdma: [rocep1s0f0]\n        address: 10.231.100.2/24\n"
        "        mtu: 9000\n        speed_gbps: 200\n        peer: worker\n",
        "      - &rail\n        device: enp1s0f0np0\n        rdma: [rocep1s0f0]\n        address: 10.231.100.2/24\n"
        "        mtu: 9000\n        speed_gbps: 200\n        peer: worker\n"
        "      - <<: *rail\n        device: enp9s0\n        rdma: [rocep9s0]\n        address: 10.231.120.2/24\n",
    )
    text = text.replace(
        "        address: 10.231.111.3/24\n        mtu: 9000\n        speed_gbps: 40\n        peer: offload\n",
        "        address: 10.231.111.3/24\n        mtu: 9000\n        speed_gbps: 40\n        peer: offload\n"
        "      - {device: enp9s0, address: 10.231.120.3/24, speed_gbps: 200, peer: head}\n",
    )
    path = tmp_path / "anchors.yaml"
    path.write_text(text)
    inv = load_inventory(path)
    merged = inv.hosts["head"].fabric[1]
    assert (merged.device, merged.mtu, merged.peer, str(merged.address)) == ("enp9s0", 9000, "worker", "10.231.120.2/24")


def test_dates_and_versions_stay_text(tmp_path):
    path = tmp_path / "dates.yaml"
    path.write_text(LAB.replace("served_model_name: deepseek-v4.1-flash", "served_model_name: 2026-10-31"))
    assert load_inventory(path).runtime.served_model_name == "2026-10-31"


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + LAB.encode())
    assert load_inventory(path).cluster.name == "lab"
