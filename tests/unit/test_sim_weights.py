"""The simulator refuses an incomplete model folder as vLLM 0.33 does (SIM_CHECK_MODEL_PATH=1).

Real `vllm serve` processes on 127.0.0.1 over copies of a tiny generated checkpoint (checkpoint.py),
broken by hand: a shard the index names gone, a shard cut short, a corrupt safetensors header,
config.json gone. The messages are vLLM's (model_loader/default_loader.py, weight_utils.py,
transformers_utils/config.py) and safetensors' (SafeTensors::read_metadata, checked against
safetensors 0.8.0 on the same bytes). Each rank reads its own node's copy: a broken copy on the
Ray worker's node alone fails rank 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_conformance import assert_conforms
from test_sim_cluster import Cluster

from sparkctl_lab import checkpoint
from sparkctl_lab.checkpoint import DRAFTER_REPO, TARGET_REPO, KiB
from sparkctl_lab.sim import harness, weights

SHARDS = [f"model-0000{i}-of-00006.safetensors" for i in range(1, 7)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> checkpoint.Store:
    specs = checkpoint.specs(target_bytes=192 * KiB, drafter_bytes=64 * KiB, gated_bytes=64 * KiB)
    return checkpoint.ensure(specs, root=tmp_path_factory.mktemp("hub"))


def place(store: checkpoint.Store, repo: str, dest: Path) -> Path:
    """The repo's files at dest, as a download leaves them."""
    for path, f in store.manifest(repo).items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store.blob(f["sha256"]), dest / path)
    return dest


def truncate(path: Path, by: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-by])


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def serve(model: Path, tmp_path: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    argv = harness.module_argv(
        "vllm_cli",
        "serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(harness.free_port()),
        "--max-model-len",
        "65536",
        *extra,
    )
    env = harness.sim_env(str(tmp_path), SIM_TIME_SCALE="0.001", SIM_CHECK_MODEL_PATH="1")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


BROKEN = {
    "a shard the index names is missing": (
        lambda d: (d / SHARDS[3]).unlink(),
        lambda d: f"FileNotFoundError: Weight files referenced in index but missing: {{'{d / SHARDS[3]}'}}",
        None,
    ),
    "a shard is cut short": (
        lambda d: truncate(d / SHARDS[2], 1000),
        lambda d: (
            "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered"
        ),
        "2/6",  # the two shards before it loaded
    ),
    "a shard's header is corrupt": (
        lambda d: overwrite(d / SHARDS[4], 8, b"#garbage"),
        lambda d: (
            "safetensors_rust.SafetensorError: Error while deserializing header: invalid JSON in header: "
            "expected value at line 1 column 1"
        ),
        "4/6",
    ),
    "a shard's header length is garbage": (
        lambda d: overwrite(d / SHARDS[0], 0, b"\xff" * 8),
        lambda d: "safetensors_rust.SafetensorError: Error while deserializing header: header too large",
        "0/6",
    ),
    "a consolidated*.safetensors below it makes it Mistral's format": (
        lambda d: shutil.copyfile(d / SHARDS[0], d / "original" / "consolidated.safetensors"),
        lambda d: f"RuntimeError: Cannot find any model weights with `{d}`",
        None,
    ),
    "config.json is missing": (
        lambda d: (d / "config.json").unlink(),
        lambda d: (
            f"ValueError: Invalid repository ID or local directory specified: '{d}'.\n"
            "Please verify the following requirements:\n1. Provide a valid Hugging Face repository ID."
        ),
        None,
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_model_folder_stops_start_up_with_vllms_message(store, tmp_path, case):
    breaks, message, bar = BROKEN[case]
    model = place(store, TARGET_REPO, tmp_path / "DeepSeek-V4.1-Flash")
    breaks(model)
    done = serve(model, tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert message(model) in done.stderr, done.stderr[-2000:]
    assert "Starting vLLM server" not in done.stdout
    bars = [ln for ln in done.stdout.splitlines() if ln.startswith("Loading safetensors checkpoint shards:")]
    if bar is None:  # refused before the first shard is opened
        assert bars == []
    else:  # refused while loading, after the shards before it
        assert f"| {bar} [" in bars[-1], bars
        assert "EngineCore failed to start." in done.stdout
    assert_conforms(done.stdout + done.stderr)


def test_whole_folders_start_the_target_and_the_drafter_at_its_own_path(store, tmp_path):
    model = place(store, TARGET_REPO, tmp_path / "DeepSeek-V4.1-Flash")
    drafter = place(store, DRAFTER_REPO, tmp_path / "drafter")  # one model.safetensors, no index
    assert not (drafter / weights.INDEX).exists()
    for folder, shards in ((model, 6), (drafter, 1)):
        port = harness.free_port()
        argv = harness.module_argv(
            "vllm_cli", "serve", str(folder), "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "65536"
        )
        env = harness.sim_env(str(tmp_path), SIM_TIME_SCALE="0.001", SIM_CHECK_MODEL_PATH="1")
        proc = harness.Proc(folder.name, argv, env, str(tmp_path / f"{folder.name}.log")).start()
        try:
            assert harness.wait_http(f"http://127.0.0.1:{port}/health", timeout=60, proc=proc), proc.log()[-3000:]
            assert f"{shards}/{shards} [" in proc.log()
            assert ("DeepSeekV4MTPModel" in proc.log()) == (folder == drafter)  # its path says drafter
        finally:
            proc.stop()


def test_a_local_drafter_is_checked_too(store, tmp_path):
    model = place(store, TARGET_REPO, tmp_path / "DeepSeek-V4.1-Flash")
    drafter = place(store, DRAFTER_REPO, tmp_path / "drafter")
    truncate(drafter / "model.safetensors", 10)
    spec = json.dumps({"method": "draft_model", "model": str(drafter), "num_speculative_tokens": 3})
    done = serve(model, tmp_path, "--speculative-config", spec)
    assert done.returncode == 1
    assert "SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered" in done.stderr
    assert "| 6/6 [" in done.stdout  # the target's own shards loaded


def test_the_folder_check_reads_headers_never_the_data(store, tmp_path):
    model = place(store, TARGET_REPO, tmp_path / "m")
    overwrite(model / SHARDS[1], os.path.getsize(model / SHARDS[1]) - 100, b"\0" * 50)  # data changed, size kept
    assert weights.check(str(model)) is None  # vLLM does not hash the bytes either: sparkctl's digests must


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="a node of its own needs a mount namespace (root)"
)
def test_a_broken_copy_on_the_ray_workers_node_fails_rank_1(store, tmp_path):
    good = place(store, TARGET_REPO, tmp_path / "DeepSeek-V4.1-Flash")
    broken = place(store, TARGET_REPO, tmp_path / "worker-copy")
    (broken / SHARDS[3]).unlink()
    c = Cluster(str(tmp_path), SIM_CHECK_MODEL_PATH="1")
    try:
        c.start_head()
        # the worker node sees its own disk at the model's path: the broken copy bound over it
        env = {**c.env, "RAY_TMPDIR": str(tmp_path / "worker-raytmp")}
        os.makedirs(env["RAY_TMPDIR"], exist_ok=True)
        ray = " ".join(harness.module_argv("ray_cli", "start", f"--address=127.0.0.1:{c.gcs_port}", "--block"))
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f"mount --bind {broken} {good} && exec {ray}"]
        worker = harness.Proc("worker", argv, env, str(tmp_path / "worker.log")).start()
        c.procs.append(worker)
        assert worker.wait_log("Ray runtime started.", 20), worker.log()
        argv = harness.module_argv(
            "vllm_cli", "serve", str(good), "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray",
            "--host", "127.0.0.1", "--port", str(harness.free_port()), "--max-model-len", "65536",
        )  # fmt: skip
        done = subprocess.run(argv, env=c.env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
        assert "ray.exceptions.RayTaskError(FileNotFoundError): ray::RayWorkerProc.initialize_worker() (pid=" in done.stderr
        assert f"FileNotFoundError: Weight files referenced in index but missing: {{'{good / SHARDS[3]}'}}" in done.stderr
        assert "| 6/6 [" in done.stdout  # rank 0's copy, on the head's node, loaded whole
        assert_conforms(done.stdout + done.stderr)
    finally:
        c.close()
