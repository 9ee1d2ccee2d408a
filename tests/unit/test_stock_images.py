"""`sparkctl render` says when the image is stock vLLM (vLLM's own or NVIDIA's NGC build, known by
reference) and the inventory asks for what only a fork has: a MoE backend the checkpoint's path has
no kernel for in vLLM 0.33 (flashinfer_b12x on MXFP4), or a drafter on the offload host."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import clirun
import pytest
import yaml

from sparkctl.runtime.stock_images import stock_vllm

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"


def render(tmp_path: Path, seed: str, *options: str, **runtime) -> subprocess.CompletedProcess:
    doc = yaml.safe_load((INVENTORIES / seed).read_text())
    doc["runtime"].update(runtime)
    path = tmp_path / seed
    path.write_text(yaml.safe_dump(doc))
    return clirun.sparkctl(["render", "-i", str(path), *options], timeout=60)


@pytest.mark.parametrize(
    "ref, kind",
    [
        ("vllm/vllm-openai:v0.33.0", "vLLM's official image"),
        ("docker.io/vllm/vllm-openai@sha256:" + "a" * 64, "vLLM's official image"),
        ("index.docker.io/vllm/vllm-openai", "vLLM's official image"),
        ("nvcr.io/nvidia/vllm:25.10-py3", "NVIDIA's NGC vLLM image"),
        ("vllm/vllm-openai-rocm:v0.33.0", None),  # another image of vLLM's, not the CUDA one
        ("dgx-splice/vllm-overlays:local", None),
        ("dspark-vllm-gx10:0.1.1", None),
        ("registry.example.com:5000/vllm/vllm-openai:v0.33.0", None),  # a mirror is someone's build of it
    ],
)
def test_stock_vllm_is_known_by_its_reference(ref, kind):
    assert stock_vllm(ref) == kind


def test_flashinfer_b12x_on_mxfp4_under_vllms_image_is_a_warning(tmp_path):
    # the DSpark recipe: flashinfer_b12x on DeepSeek-V4-Flash's MXFP4 experts, which its fork runs
    assert render(tmp_path, "dspark-recipe.yaml").stderr == ""
    stock = render(tmp_path, "dspark-recipe.yaml", image="vllm/vllm-openai:v0.33.0")
    assert stock.returncode == 0, stock.stderr
    assert "warning: runtime.image vllm/vllm-openai:v0.33.0 is vLLM's official image (stock vLLM)" in stock.stderr
    assert "moe_backend='flashinfer_b12x' is not supported for MXFP4 MoE" in stock.stderr
    assert "docker run" in stock.stdout and "warning" not in stock.stdout  # `render > launch.txt` keeps the launch only
    # the same backend on an NVFP4 checkpoint is vLLM's own: nothing to say
    assert render(tmp_path, "dspark-recipe.yaml", image="vllm/vllm-openai:v0.33.0", moe_quantization="nvfp4").stderr == ""


def test_a_remote_drafter_under_ngcs_image_is_a_warning_in_json_too(tmp_path):
    assert json.loads(render(tmp_path, "splice-build.yaml", "--json").stdout)["warnings"] == []
    doc = json.loads(render(tmp_path, "splice-build.yaml", "--json", image="nvcr.io/nvidia/vllm:25.10-py3").stdout)
    (warning,) = doc["warnings"]
    assert warning.startswith("runtime.image nvcr.io/nvidia/vllm:25.10-py3 is NVIDIA's NGC vLLM image (stock vLLM)")
    assert "never calls a remote drafter" in warning and "SPLICE_DRAFTER_URL" in warning and "offload" in warning
    assert 'docs/inventory.md "Images"' in warning
