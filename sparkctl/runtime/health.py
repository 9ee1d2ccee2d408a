"""Is the runtime serving? /health, a first streamed token, and a real completion as smoke test.

vLLM refuses connections while loading, so "not serving yet" and "dead" differ only by whether
the container still runs and what its log says last: the phase shown to the operator comes from
the real log lines (facts/logs.py phase_of, fatal_line; vllm-interface.md).
"""

from __future__ import annotations

from typing import Optional

from sparkctl.launch.endpoints import engine_url, front_url


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
    from sparkctl.sse import FirstToken

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
