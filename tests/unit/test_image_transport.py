"""Layer-level image transfer, on a real `docker save` of a 3-layer image from the lab's dockerd
20.10 (tests/unit/recorded/image_transport/save-3-layers.*): chain IDs as dockerd's layer store
names them, and the source-side filter that drops the layers a destination holds."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sparkctl.transport.images import FILTER_SOURCE, chain_ids, save_command

REC = Path(__file__).parent / "recorded" / "image_transport"
TAR = (REC / "save-3-layers.tar").read_bytes()
META = json.loads((REC / "save-3-layers.json").read_text())
DIFFS = META["inspect"]["RootFS"]["Layers"]
IMAGE_ID = META["inspect"]["Id"]


def run_filter(data: bytes, chains: list[str], diffs: list[str]) -> tuple[int, bytes, list[str]]:
    p = subprocess.run(
        [sys.executable, "-c", FILTER_SOURCE, json.dumps({"chains": chains, "diffs": diffs})],
        input=data, capture_output=True,
    )  # fmt: skip
    return p.returncode, p.stdout, p.stderr.decode().splitlines()


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        return {m.name: (tf.extractfile(m).read() if m.isfile() else b"") for m in tf.getmembers()}


def manifest_layers() -> list[str]:
    return json.loads(members(TAR)["manifest.json"])[0]["Layers"]


def done_stats(lines: list[str]) -> dict:
    return json.loads([line for line in lines if line.startswith("sparkctl-filter done ")][-1].split(" ", 2)[2])


def test_chain_ids_are_the_ones_dockerd_layer_store_uses():
    assert chain_ids(DIFFS) == [row["chain_id"] for row in META["layerdb"]]
    assert [row["diff_id"] for row in META["layerdb"]] == DIFFS


def test_nothing_held_passes_the_save_through_byte_for_byte():
    rc, out, err = run_filter(TAR, [], [])
    assert rc == 0 and out == TAR
    assert done_stats(err) == {"bytes_in": len(TAR), "bytes_out": len(TAR), "layers_sent": 3, "layers_skipped": 0,
                               "bytes_skipped": 0}  # fmt: skip


def test_held_layers_are_dropped_and_everything_else_is_kept_intact():
    chains = chain_ids(DIFFS)
    rc, out, err = run_filter(TAR, chains[:2], DIFFS[:2])
    assert rc == 0
    original, filtered = members(TAR), members(out)
    dropped = set(manifest_layers()[:2])
    assert set(filtered) == set(original) - dropped
    assert all(filtered[name] == original[name] for name in filtered)  # the top layer, jsons, config, manifest
    stats = done_stats(err)
    assert stats["layers_sent"] == 1 and stats["layers_skipped"] == 2
    assert stats["bytes_skipped"] == sum(len(original[n]) for n in dropped)
    assert stats["bytes_out"] == len(out) < len(TAR) - stats["bytes_skipped"] + 2048


def test_top_layer_is_proven_too_even_with_html_characters_in_its_config():
    """The top layer's v1 JSON carries the image config (a label with < & >, escaped as Go does)."""
    config = members(TAR)[IMAGE_ID.split(":")[1] + ".json"]
    assert json.loads(config)["config"]["Labels"]["org.example.note"] == "a<b & c>d"
    assert b"a\\u003cb \\u0026 c\\u003ed" in config  # as dockerd wrote it
    rc, out, err = run_filter(TAR, chain_ids(DIFFS), DIFFS)
    assert rc == 0
    assert not any(name.endswith("layer.tar") for name in members(out))
    assert done_stats(err)["layers_skipped"] == 3


def test_a_layer_held_under_another_parent_is_not_dropped():
    """Held chain IDs that are not this image's prefix prove nothing: every layer is sent."""
    other = ["sha256:" + "ab" * 32, chain_ids(["sha256:" + "cd" * 32, DIFFS[1]])[1]]
    rc, out, err = run_filter(TAR, other, [])
    assert rc == 0 and out == TAR and done_stats(err)["layers_skipped"] == 0


def test_a_truncated_save_fails_instead_of_passing_half_an_image():
    rc, out, err = run_filter(TAR[: len(TAR) // 2 + 100], [], [])
    assert rc == 1
    assert any("ended" in line for line in err)


def test_the_source_command_runs_save_through_the_filter(tmp_path):
    """save_command as the source node's shell runs it, with `docker` answering the recorded save."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'save {IMAGE_ID}' ] || exit 3\ncat {REC / 'save-3-layers.tar'}\n")
    (bin_dir / "docker").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    chains = chain_ids(DIFFS)
    cmd = save_command(IMAGE_ID, list(zip(chains[:2], DIFFS[:2])))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, env=env)
    assert p.returncode == 0, p.stderr
    assert set(members(p.stdout)) == set(members(TAR)) - set(manifest_layers()[:2])


def test_a_node_without_python3_sends_the_whole_save(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\ncat {REC / 'save-3-layers.tar'}\n")
    (bin_dir / "docker").chmod(0o755)
    (bin_dir / "cat").symlink_to("/bin/cat")
    chains = chain_ids(DIFFS)
    p = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", save_command(IMAGE_ID, list(zip(chains, DIFFS)))],
                       capture_output=True, env={"PATH": str(bin_dir)})  # fmt: skip
    assert p.returncode == 0 and p.stdout == TAR
    assert b"sparkctl-filter unavailable: no python3" in p.stderr


@pytest.mark.parametrize("cut", [0, 1])
def test_the_filter_stops_when_its_reader_goes_away(cut):
    """An interrupted transfer: the next write fails and the filter exits at once (no traceback)."""
    p = subprocess.Popen([sys.executable, "-c", FILTER_SOURCE, "{}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip
    p.stdout.close()  # the reader (ssh / sparkctl) is gone
    try:
        p.stdin.write(TAR[: 4096 * (cut + 1)])
        p.stdin.close()
    except BrokenPipeError:
        pass
    assert p.wait(timeout=10) != 0
    assert b"Traceback" not in p.stderr.read()
