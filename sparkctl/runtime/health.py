"""Is the runtime serving? Phases from the head's log, /health, and a real completion as smoke test.

vLLM refuses connections while loading, so "not serving yet" and "dead" differ only by whether
the container still runs and what its log says last. The phase shown to the operator comes
from the real log lines (vllm-interface.md).
"""

from __future__ import annotations

import re
from typing import Optional

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


def engine_endpoint(inv) -> tuple[str, int, str]:
    """(address, port, path prefix) of the engine as sparkctl reaches it: behind a gateway it listens
    on the head's loopback only (gateway.engine_port), so through the gateway's engine route, which
    never holds; without one, on runtime.port itself."""
    from sparkctl.gateway.placement import ENGINE_PATH

    head = inv.hosts_with_role("head")[0]
    return inv.hosts[head].ssh.address, inv.runtime.port, ENGINE_PATH if inv.gateway.enabled else ""


def engine_url(inv) -> str:
    """base_url, unchecked (a URL to name, not to call)."""
    address, port, path = engine_endpoint(inv)
    return f"http://{address}:{port}{path}"


def front_url(inv) -> str:
    """public_url, unchecked (a URL to name, not to call)."""
    head = inv.hosts_with_role("head")[0]
    return f"http://{inv.hosts[head].ssh.address}:{inv.runtime.port}"


def base_url(inv) -> str:
    """The engine itself (behind the gateway, through its engine route: engine_endpoint): what
    sparkctl's own checks ask, so a holding gateway never hides the engine's state from them."""
    from sparkctl.transport.guard import check_url

    url = engine_url(inv)
    check_url(url, "the runtime's HTTP endpoint")
    return url


def public_url(inv) -> str:
    """What clients use: runtime.port on the head (the gateway, or the engine when it has none)."""
    from sparkctl.transport.guard import check_url

    url = front_url(inv)
    check_url(url, "the cluster's public endpoint")
    return url


def health(client, url: str) -> Optional[int]:
    """HTTP status of /health, or None when the port refuses (loading) or does not answer."""
    import httpx

    try:
        return client.get(f"{url}/health", timeout=3).status_code
    except httpx.HTTPError:
        return None


def first_token(client, url: str, model: str) -> str:
    """One streamed completion, read up to its first content token (then closed: the engine aborts
    the rest). Raises on anything but a 200 stream that carries a token: what a client waiting
    behind the gateway is released to is a stream that starts, not only /health."""
    from sparkctl.gateway.sse import FirstToken

    watch = FirstToken()
    body = {"model": model, "prompt": "Count from 1 to 5:", "max_tokens": 4, "temperature": 0, "stream": True}
    with client.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            watch.feed(chunk)
            if watch.seen:
                return "token"
    raise ValueError(f"the stream ended without a content token (finish_reason {watch.finish_reason})")


def smoke(client, url: str, model: str) -> str:
    """A real completion; returns the text. Raises on anything but a 200 with a choice."""
    r = client.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": "Count from 1 to 5:", "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    r.raise_for_status()
    return r.json()["choices"][0]["text"]
