"""Stock vLLM images, recognised by their reference, and what an inventory asks of them that only a
fork has: `render` says so (a warning on stderr, `warnings` under --json) before anything is pulled.

Stock here is upstream vLLM as its publishers ship it: vLLM's own image (docker/Dockerfile, target
vllm-openai) and NVIDIA's NGC build of it. Images built from them under another name (sPLIce's
overlays, eugr's spark-vllm-docker, the DSpark image) are the forks this warns about needing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sparkctl.facts.logs import expected_moe_names
from sparkctl.inventory.image_ref import REFERENCE
from sparkctl.launch.plan import DRAFTER_URL_ENV

if TYPE_CHECKING:
    from sparkctl.inventory.models import Inventory

# repository (as docker normalises it, without Docker Hub's own host) -> what the image is
STOCK_VLLM_REPOSITORIES = {
    "vllm/vllm-openai": "vLLM's official image",
    "nvcr.io/nvidia/vllm": "NVIDIA's NGC vLLM image",
}
_DOCKER_HUB_HOSTS = ("docker.io/", "index.docker.io/")  # docker reads both as the implicit default registry

# vLLM 0.33 refuses a --moe-backend its checkpoint path has no kernel for, at load:
# model_executor/layers/fused_moe/oracle/{nvfp4,mxfp4}.py map_*_backend, whose names
# facts/logs.py MOE_BACKEND_NAMES mirrors. The path's word in that ValueError:
_PATH_WORD = {"nvfp4": "NvFP4", "mxfp4": "MXFP4"}


def stock_vllm(image: str) -> Optional[str]:
    """What the stock vLLM image `image` is (any tag or digest of it), None for any other image."""
    m = REFERENCE.match(image)
    if m is None:
        return None
    name = m.group("name")
    for host in _DOCKER_HUB_HOSTS:
        name = name.removeprefix(host)
    return STOCK_VLLM_REPOSITORIES.get(name)


def fork_only_warnings(inv: "Inventory") -> list[str]:
    """`render`'s words for each thing the inventory asks of a stock vLLM image that only a fork does."""
    r = inv.runtime
    kind = stock_vllm(r.image)
    if kind is None:
        return []
    words = []
    backend, path = r.moe_backend, r.moe_quantization
    if backend and backend != "auto" and path and expected_moe_names(path, backend) is None:
        words.append(
            f"runtime.image {r.image} is {kind} (stock vLLM), whose {_PATH_WORD[path]} MoE has no backend {backend}: "
            f"vLLM 0.33 refuses it at load (fused_moe/oracle/{path}.py map_{path}_backend: \"moe_backend='{backend}' "
            f'is not supported for {_PATH_WORD[path]} MoE"); run an image whose vLLM has it (the DSpark image has '
            f"flashinfer_b12x on MXFP4) or set runtime.moe_backend to one the {path} path has (e.g. b12x)"
        )
    spec = r.speculative
    if spec is not None and spec.drafter_host:
        words.append(
            f"runtime.image {r.image} is {kind} (stock vLLM), which never calls a remote drafter: it reads no "
            f"{DRAFTER_URL_ENV} (sPLIce's overlays do), so the drafter on {spec.drafter_host} would serve nobody; run "
            'an overlay image with the interface docs/inventory.md "Images" describes, or drop speculative.drafter_host'
        )
    return words
