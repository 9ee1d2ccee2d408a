"""The simulator's command lines fail the way vLLM's and Ray's do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sparkctl_lab.sim import harness


def run(module: str, *args: str, tmp_path, timeout: float = 20.0, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        harness.module_argv(module, *args),
        env=harness.sim_env(str(tmp_path), **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--foo", "3"], "vllm serve: error: unrecognized arguments: --foo 3"),
        (["--max-model-len", "lots"], "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'lots'"),
        (["--moe-backend", "nope"], "vllm serve: error: argument --moe-backend: invalid choice: 'nope'"),
        (["--kv-cache-dtype", "fp7"], "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp7'"),
        (["--speculative-config", "{bad json"], "vllm serve: error: argument --speculative-config:"),
        (["--tensor-parallel-size", "two"], "vllm serve: error: argument --tensor-parallel-size/-tp: invalid int value: 'two'"),
    ],
)
def test_bad_flags_fail_like_vllm_argparse(tmp_path, args, expected):
    done = run("vllm_cli", "serve", "/models/m", *args, tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: vllm serve [model_tag] [options]\n")
    assert expected in done.stderr


def test_batched_tokens_below_max_num_seqs_fails_at_startup(tmp_path):
    done = run(
        "vllm_cli",
        "serve",
        "/models/m",
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "4",
        "--port",
        str(harness.free_port()),
        tmp_path=tmp_path,
        SIM_TIME_SCALE="0.001",
    )
    assert done.returncode == 1
    assert "ValidationError: 1 validation error for SchedulerConfig" in done.stderr
    assert "max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8)" in done.stderr
    assert "EngineCore failed to start." in done.stdout


def test_max_model_len_above_kv_pool_fails_with_vllms_message(tmp_path):
    done = run(
        "vllm_cli",
        "serve",
        "/models/m",
        "--max-model-len",
        "1M",
        "--port",
        str(harness.free_port()),
        tmp_path=tmp_path,
        SIM_TIME_SCALE="0.001",
        SIM_KV_POOL_TOKENS="500000",
    )
    assert done.returncode == 1
    assert "To serve at least one request with the models's max seq len (1048576)" in done.stderr
    assert "the estimated maximum model length is 500000" in done.stderr


def test_human_readable_max_model_len_is_read_as_vllm_reads_it(tmp_path):
    from sparkctl_lab.sim.serve_args import parse

    assert parse(["m", "--max-model-len", "256k"]).max_model_len == 256000
    assert parse(["m", "--max-model-len", "256K"]).max_model_len == 262144
    assert parse(["m", "--max-model-len", "auto"]).max_model_len == -1
    # vLLM accepts underscores in flag names and normalises moe backend spelling
    cfg = parse(["m", "--max_num_seqs", "3", "--moe-backend", "FlashInfer-B12X"])
    assert cfg.max_num_seqs == 3 and cfg.moe_backend == "flashinfer_b12x"


def test_vllm_version_and_unknown_subcommand(tmp_path):
    done = run("vllm_cli", "--version", tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "0.33.0"
    done = run("vllm_cli", "serv", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "vllm: error: argument subparser: invalid choice: 'serv'" in done.stderr


def test_ray_status_without_a_cluster_fails(tmp_path):
    done = run("ray_cli", "status", tmp_path=tmp_path)
    assert done.returncode == 1
    assert "Could not find any running Ray instance" in done.stdout


def test_worker_cannot_join_a_missing_head(tmp_path):
    port = harness.free_port()
    done = run("ray_cli", "start", f"--address=127.0.0.1:{port}", "--block", tmp_path=tmp_path, SIM_RAY_JOIN_TIMEOUT="1")
    assert done.returncode == 1
    assert f"Failed to connect to GCS at address 127.0.0.1:{port}" in done.stdout


def test_module_imports_only_the_standard_library():
    """The image has python3 + stdlib only: importing the CLIs must not pull in anything else."""
    code = (
        "import sys, sparkctl_lab.sim.vllm_cli, sparkctl_lab.sim.ray_cli, sparkctl_lab.sim.server;"
        "import sysconfig, os;"
        "std = sysconfig.get_paths()['stdlib'];"
        "bad = [m for m, mod in sys.modules.items() if getattr(mod, '__file__', None) and "
        "not mod.__file__.startswith(std) and not m.startswith('sparkctl')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, '.');" + code],
        capture_output=True,
        text=True,
        cwd=harness.sim_env("/tmp")["PYTHONPATH"].split(":")[0],
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_moe_backend_names_follow_the_checkpoints_quantization_path(tmp_path):
    # item 1 (simulator side): vLLM 0.33 logs the enum name; MXFP4 has no flashinfer_b12x (fused_moe/oracle/mxfp4.py)
    def start(quant: str, backend: str, expect_rc: int | None):
        port = harness.free_port()
        argv = harness.module_argv(
            "vllm_cli", "serve", "/models/m", "--port", str(port), "--max-model-len", "65536", "--moe-backend", backend
        )
        env = harness.sim_env(str(tmp_path), SIM_TIME_SCALE="0.001", SIM_CHECKPOINT_QUANT=quant)
        proc = harness.Proc(f"{quant}-{backend}", argv, env, str(tmp_path / f"{quant}-{backend}.log")).start()
        try:
            if expect_rc is None:
                assert harness.wait_http(f"http://127.0.0.1:{port}/health", timeout=30, proc=proc), proc.log()[-2000:]
            else:
                assert proc.wait(30) == expect_rc
            return proc.log()
        finally:
            proc.stop()

    log = start("mxfp4", "b12x", None)
    assert "Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend." in log and "NvFp4" not in log
    log = start("mxfp4", "flashinfer_b12x", 1)
    assert "ValueError: moe_backend='flashinfer_b12x' is not supported for MXFP4 MoE. Expected one of ['b12x'," in log
    log = start("nvfp4", "cutlass", None)
    assert "Using 'VLLM_CUTLASS' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM', " in log


@pytest.mark.parametrize(
    "args, expected",
    [  # entrypoints/cli/serve.py, engine/arg_utils.py, config/parallel.py (vLLM 0.33.0)
        (
            ["--nnodes", "2", "--node-rank", "1", "--headless", "--api-server-count", "1"],
            "ValueError: --api-server-count=1 cannot be used with --headless (no API servers are started in headless mode).",
        ),
        (
            ["--tensor-parallel-size", "3", "--nnodes", "2", "--node-rank", "1", "--headless"],
            "ValueError: Invalid data-parallel launch options: `--nnodes 2` must evenly divide the total world size (3).",
        ),
        (
            ["--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "2", "--headless"],
            "`--node-rank` must be between 0 and 1; got `--node-rank 2`.",
        ),
        (
            [
                "--tensor-parallel-size",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--headless",
                "--distributed-executor-backend",
                "ray",
            ],
            "ValueError: nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher.",
        ),
    ],
)
def test_multinode_launch_options_vllm_refuses(tmp_path, args, expected):
    done = run("vllm_cli", "serve", "/models/m", *args, tmp_path=tmp_path, SIM_TIME_SCALE="0.001")
    assert done.returncode == 1, done.stdout + done.stderr
    assert expected in done.stderr


def test_flashinfer_b12x_is_refused_for_a_checkpoint_that_sets_swiglu_limit(tmp_path):
    # fused_moe/oracle/nvfp4.py select_nvfp4_moe_backend(): an explicit backend outside
    # NVFP4_BACKENDS_WITH_CLAMP is refused when the model config sets swiglu_limit (DeepSeek V4 does)
    def start(backend: str, expect_rc: int | None) -> str:
        port = harness.free_port()
        argv = harness.module_argv(
            "vllm_cli", "serve", "/models/m", "--port", str(port), "--max-model-len", "65536", "--moe-backend", backend
        )
        env = harness.sim_env(
            str(tmp_path), SIM_TIME_SCALE="0.001", SIM_CHECKPOINT_QUANT="nvfp4", SIM_CHECKPOINT_SWIGLU_LIMIT="10.0"
        )
        proc = harness.Proc(f"swiglu-{backend}", argv, env, str(tmp_path / f"swiglu-{backend}.log")).start()
        try:
            if expect_rc is None:
                assert harness.wait_http(f"http://127.0.0.1:{port}/health", timeout=30, proc=proc), proc.log()[-2000:]
            else:
                assert proc.wait(30) == expect_rc
            return proc.log()
        finally:
            proc.stop()

    log = start("flashinfer_b12x", 1)
    assert (
        "ValueError: Model sets swiglu_limit=10.0, but the explicitly requested moe_backend='flashinfer_b12x' does "
        "not apply the SwiGLU clamp."
    ) in log and "EngineCore failed to start." in log
    log = start("b12x", None)  # the same GB10 kernels with the clamp; the list drops FLASHINFER_CUTEDSL_BATCHED
    assert (
        "Using 'B12X' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', "
        "'FLASHINFER_CUTLASS'," in log
    )
