"""The runtime's log lines an operator greps for, found on the host (docs/conformance.md: each line's
vLLM 0.33 source and format string).

The scan runs on the host (awk over `docker logs`), so only matching lines cross the network:
a container that has run for weeks can have gigabytes of log. Startup lines (KV pool size, MoE
backend) are kept from the start, bad signs are capped per kind; for the newest speculative
decoding line and the newest compile line of each kind (cache hit, compiled) only the newest is
kept, so the last start's warm/cold is known. `classify` turns the lines into facts the checks read.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

# (the lines' needles, phase shown to the operator), newest phase wins. The vLLM 0.33 line behind
# each needle is in docs/conformance.md; Ray's own lines come from `ray start` / ray.init. Doctor's
# host-side log scan (facts/logs.py) keeps the newest line of each needle.
PHASES = [
    (("Ray runtime started", "Started a local Ray instance"), "starting Ray"),
    (("Waiting for creating a placement group",), "waiting for the worker to join"),
    # each rank's torch.distributed init (parallel_state.py); under mp rank 0 then waits, silent, for the
    # headless ranks at --master-addr:--master-port
    (("distributed_init_method=",), "joining the ranks (torch.distributed)"),
    (("Starting to load model", "Loading safetensors checkpoint shards"), "loading weights"),
    (("Directly load the compiled graph",), "compiling (cache hit)"),
    (("Compiling a graph for compile range", "Cache the graph of compile range"), "compiling (cache miss: cold start)"),
    (("KV cache size:",), "allocating KV cache"),
    (("Capturing CUDA graphs",), "capturing CUDA graphs"),
    (("init engine (profile, create kv cache, warmup model) took",), "engine initialised"),
    (("Starting vLLM server on",), "serving"),
]
FATAL = [
    re.compile(r"EngineCore encountered a fatal error"),
    re.compile(r"EngineCore failed to start"),
    # ray_executor_v2.py formats the list of dead ranks: "RayWorkerProc rank=[1] died unexpectedly, ..."
    re.compile(r"RayWorkerProc rank=\[?[\d, ]+\]? died unexpectedly"),
    re.compile(r"Worker proc \S+ died unexpectedly"),
    # mp: the head's rank 0 lost its collective peer (multiproc_executor.py collective_rpc, pynccl NCCL_CHECK)
    re.compile(r"Worker failed with error '.*', please check the stack trace above"),
    re.compile(r"NCCL error: remote process exited or there was a network error"),
    re.compile(r"device-side assert triggered"),
    re.compile(r"vllm serve: error:"),
]


def line_phase(line: str) -> Optional[str]:
    """The last phase whose needle the line holds, None for none."""
    return next((name for needles, name in reversed(PHASES) if any(n in line for n in needles)), None)


def phase_of(log: str) -> str:
    phase = "starting"
    for line in log.splitlines():
        phase = line_phase(line) or phase
    return phase


def fatal_line(log: str) -> Optional[str]:
    for line in log.splitlines():
        if any(p.search(line) for p in FATAL):
            return line.strip()
    return None


# Lower-case substrings the host-side awk keeps (each at most PER_KIND times).
# Order matters: a line is kept under the first kind it matches ("Using 'X' NvFp4 MoE backend out of
# potential backends: [... 'MARLIN' ...]" is a backend line, not a Marlin fallback).
KINDS = {
    "moe_backend": "moe backend",
    "marlin": "leveraging the marlin kernel",
    "device_assert": "device-side assert triggered",
    "engine_fatal": "enginecore encountered a fatal error",
    "engine_start": "enginecore failed to start",
    "worker_died": "died unexpectedly",
    # mp: the head's collective with a lost headless rank (pynccl's "NCCL error: " + ncclRemoteError's text)
    "peer_lost": "remote process exited or there was a network error",
    # mp: a headless node's launch line, naming the head it joins
    "headless": "headless multiproc executor, with head node address",
    "oom": "out of memory",  # torch.OutOfMemoryError ("CUDA out of memory"), the host's OOM killer
    "kv_pool": "kv cache size:",
    "ready": "starting vllm server",
}
PER_KIND = 5
# Only the newest line of each of these is kept (exact case: vLLM's own format strings).
NEWEST = {
    "spec": "SpecDecoding metrics",
    "compile_hit": "Directly load the compiled graph(s) for compile range",
    "compile_miss": "Compiling a graph for compile range",
    # the start-up phase (PHASES): the newest line of each needle, in log order
    **{f"phase{i}": needle for i, needle in enumerate(n for needles, _ in PHASES for n in needles)},
}
SPEC_MARK = NEWEST["spec"]

# vLLM 0.33 logs the MoE backend it selected by its enum value, upper case, not by the --moe-backend
# value: map_nvfp4_backend() in model_executor/layers/fused_moe/oracle/nvfp4.py and
# map_mxfp4_backend() in .../oracle/mxfp4.py (the batched activation format swaps
# FLASHINFER_CUTEDSL -> FLASHINFER_CUTEDSL_BATCHED and MARLIN -> BATCHED_MARLIN). A value missing
# from a path's map is refused by vLLM 0.33 at start-up for a checkpoint of that path.
MOE_BACKEND_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "nvfp4": {
        "b12x": ("B12X",),
        "cutlass": ("VLLM_CUTLASS",),
        "flashinfer_trtllm": ("FLASHINFER_TRTLLM",),
        "flashinfer_cutlass": ("FLASHINFER_CUTLASS",),
        "flashinfer_cutedsl": ("FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED"),
        "flashinfer_moe_ep_cutedsl": ("FLASHINFER_MOE_EP_CUTEDSL",),
        "flashinfer_b12x": ("FLASHINFER_B12X",),
        "marlin": ("MARLIN",),
        "humming": ("HUMMING",),
        "emulation": ("EMULATION",),
    },
    "mxfp4": {
        "b12x": ("B12X_MXFP4_MXFP8", "B12X_MXFP4_BF16"),
        "deep_gemm": ("DEEPGEMM_MXFP4",),
        "flashinfer_trtllm": ("FLASHINFER_TRTLLM_MXFP4_BF16", "FLASHINFER_TRTLLM_MXFP4_MXFP8"),
        "flashinfer_trtllm_afp8": ("FLASHINFER_TRTLLM_MXFP4_MXFP8",),
        "flashinfer_cutlass": ("FLASHINFER_CUTLASS_MXFP4_BF16", "FLASHINFER_CUTLASS_MXFP4_MXFP8"),
        "flashinfer_cutlass_afp8": ("FLASHINFER_CUTLASS_MXFP4_MXFP8",),
        "flashinfer_moe_ep_cutedsl": ("FLASHINFER_MOE_EP_CUTEDSL",),
        "flashinfer_moe_ep_mega_deep_gemm": ("FLASHINFER_MOE_EP_DEEP_GEMM",),
        "triton": ("TRITON",),
        "triton_unfused": ("TRITON_UNFUSED",),
        "humming": ("HUMMING",),
        "marlin": ("MARLIN", "BATCHED_MARLIN"),
        "aiter": (
            "AITER_MXFP4_BF16",
            "AITER_TRITON_MXFP4_BF16",
            "AITER_MXFP4_FP8",
            "AITER_MXFP4_MXFP4",
            "AITER_TRITON_MXFP4_MXFP4",
        ),
        "aiter_triton_mxfp4_bf16": ("AITER_TRITON_MXFP4_BF16",),
        "aiter_mxfp4_fp8": ("AITER_MXFP4_FP8",),
        "aiter_triton_mxfp4_mxfp4": ("AITER_TRITON_MXFP4_MXFP4",),
        "aiter_mxfp4_mxfp4": ("AITER_MXFP4_MXFP4",),
        "xpu": ("XPU",),
        "cpu": ("CPU",),
        "emulation": ("EMULATION",),
    },
}
MARLIN_BACKENDS = frozenset({"MARLIN", "BATCHED_MARLIN"})
# The word each path's line carries: "Using '%s' NvFp4 MoE backend out of ..." / "Using '%s' Mxfp4 MoE backend."
QUANT_WORD = {"nvfp4": "NvFp4", "mxfp4": "Mxfp4"}


def expected_moe_names(quantization: str, moe_backend: Optional[str]) -> Optional[tuple[str, ...]]:
    """The enum names vLLM 0.33 logs for the inventory's --moe-backend on this checkpoint path;
    None when the value has no name on that path (or is unset / auto)."""
    if not moe_backend or moe_backend == "auto":
        return None
    return MOE_BACKEND_NAMES.get(quantization, {}).get(moe_backend)


def awk_program() -> str:
    """The host-side filter: matching lines (at most PER_KIND per kind), then the newest of NEWEST in log order."""
    newest = "\n".join(
        f'  if (index($0, "{needle}")) {{ nl["{kind}"] = $0; nn["{kind}"] = NR; next }}' for kind, needle in NEWEST.items()
    )
    conds = "\n".join(
        f'  if (index(l, "{needle}") && c["{kind}"]++ < {PER_KIND}) {{ print; next }}' for kind, needle in KINDS.items()
    )
    return (
        "{\n" + newest + "\n  l = tolower($0)\n" + conds + "\n}\n"
        "END { n = 0; for (k in nn) key[++n] = k\n"
        "  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (nn[key[j]] < nn[key[i]]) { t = key[i]; key[i] = key[j]; key[j] = t }\n"
        "  for (i = 1; i <= n; i++) print nl[key[i]]\n}"
    )


def scan_command() -> str:
    """Shell: for each container id in $ids print '@@ctr <id>' and its matching log lines."""
    return f'for c in $ids; do echo "@@ctr $c"; docker logs "$c" 2>&1 | awk {shlex.quote(awk_program())}; done'


_KV = re.compile(r"KV cache size:\s*([\d,]+)\s*tokens")
_ACCEPT = re.compile(r"Mean acceptance length:\s*([\d.]+)")
_BACKEND = re.compile(r"Using '([\w-]+)' (\w+) MoE backend")
_COMPILE_SECONDS = re.compile(r"(?:took|takes) ([\d.]+) s")

# Fatal signs, most causal first: a CUDA assert kills the worker, a dead worker kills the engine.
FATAL_KINDS = ("device_assert", "worker_died", "peer_lost", "engine_fatal")
_HEADLESS = re.compile(r"with head node address (\S+) for torch\.distributed")


@dataclass
class LogFacts:
    """What one container's log says."""

    container: str
    kv_pool_tokens: Optional[int] = None
    moe_backend: Optional[str] = None  # the enum value vLLM logged, e.g. FLASHINFER_B12X
    moe_path: Optional[str] = None  # "NvFp4" or "Mxfp4": the checkpoint's quantization path as logged
    ready: bool = False
    spec_mean_acceptance: Optional[float] = None
    # The newest compile line says how the last start went: "warm" (loaded from the compile cache)
    # or "cold" (compiled), with the seconds that line reports.
    compile_start: Optional[str] = None
    compile_seconds: Optional[float] = None
    phase: Optional[str] = None  # the start-up phase its newest phase line names (PHASES)
    marlin: list[str] = field(default_factory=list)
    device_assert: list[str] = field(default_factory=list)
    engine_fatal: list[str] = field(default_factory=list)
    worker_died: list[str] = field(default_factory=list)
    peer_lost: list[str] = field(default_factory=list)
    oom: list[str] = field(default_factory=list)
    headless_master: Optional[str] = None  # mp: the head node address a headless node's launch line names

    @property
    def signs(self) -> list[tuple[str, str]]:
        """Every fatal sign as (kind, first line of that kind), most causal first."""
        return [(kind, getattr(self, kind)[0]) for kind in FATAL_KINDS if getattr(self, kind)]

    @property
    def fatal(self) -> list[str]:
        return self.device_assert + self.worker_died + self.peer_lost + self.engine_fatal


def parse_scan(text: str) -> dict[str, LogFacts]:
    """Output of `scan_command` -> LogFacts per container id."""
    out: dict[str, LogFacts] = {}
    cur: Optional[LogFacts] = None
    for line in (raw.rstrip() for raw in text.splitlines()):
        if line.startswith("@@ctr "):
            cid = line.removeprefix("@@ctr ").strip()
            cur = out.setdefault(cid, LogFacts(cid))
        elif cur is not None and line.strip():
            classify(cur, line)
    return out


def classify(facts: LogFacts, line: str) -> None:
    facts.phase = line_phase(line) or facts.phase  # lines arrive in log order: the newest phase wins
    low = line.lower()
    if SPEC_MARK in line:
        m = _ACCEPT.search(line)
        if m:
            facts.spec_mean_acceptance = float(m.group(1))
        return
    for kind, state in (("compile_hit", "warm"), ("compile_miss", "cold")):
        if NEWEST[kind] in line:
            # Lines arrive in log order: the newest wins.
            facts.compile_start = state
            m = _COMPILE_SECONDS.search(line)
            facts.compile_seconds = float(m.group(1)) if m else None
            return
    if m := _KV.search(line):
        facts.kv_pool_tokens = int(m.group(1).replace(",", ""))
    if m := _BACKEND.search(line):
        facts.moe_backend, facts.moe_path = m.group(1), m.group(2)
    if KINDS["ready"] in low:
        facts.ready = True
    if KINDS["marlin"] in low:
        facts.marlin.append(line.strip())
    if KINDS["device_assert"] in low:
        facts.device_assert.append(line.strip())
    if KINDS["engine_fatal"] in low or KINDS["engine_start"] in low:
        facts.engine_fatal.append(line.strip())
    if KINDS["worker_died"] in low:
        facts.worker_died.append(line.strip())
    if KINDS["peer_lost"] in low:
        facts.peer_lost.append(line.strip())
    if KINDS["oom"] in low:
        facts.oom.append(line.strip())
    if m := _HEADLESS.search(line):
        facts.headless_master = m.group(1)


@host_fields
class LogsFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    logs: dict[str, LogFacts] = field(default_factory=dict)  # container id -> LogFacts


# --- the facts (facts/base.py) ---------------------------------------------------------------


def _logs_probe(t) -> str:
    from sparkctl.facts.docker import cluster_ids

    return cluster_ids(t.inventory.cluster.name) + scan_command()


@fact("logs", _logs_probe, background=True)  # container id -> LogFacts
def _logs(f: HostFacts, r: Reading) -> None:
    f.logs.update(parse_scan(r.out))
