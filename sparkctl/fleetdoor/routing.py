"""Which member a request goes to: affinity for requests that share a prompt's start, bounded by load.

The key: the model and the start of the prompt. vLLM's prefix cache is block-granular from the
first token of the prompt, so two requests share cached KV only as far as their prompts agree from
the start. A chat conversation's follow-ups repeat every earlier message, so their stable start is
the messages up to and including the first user message (system prompt + first question); the key
covers those, cut at `chars` characters. A completion's prompt is cut the same way. Requests with
no prompt (GET /v1/models, /health) have no key and go by load.

The method: rendezvous (highest-random-weight) hashing of the key over the eligible members' names:
each member scores sha256(key, name) and the highest wins. A member that leaves (drained, holding,
failing) loses only the keys it won; every other key keeps its member, and when it comes back it
wins back exactly its own. Bounded load: the affine member is kept unless it has clearly more
outstanding requests than the least loaded one (more than `slack`, or half the least loaded's
count, beyond it); then the least loaded member takes the request (ties: fewest requests so far).
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional, Protocol, Sequence

ROUTED_AFFINITY = "affinity"
ROUTED_LOAD = "load"  # no key, or the affine member was too busy
PROMPT_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


class Candidate(Protocol):
    name: str
    outstanding: int
    requests: int


def _text(content) -> str:
    """A message's content as text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)


def prompt_start(doc: dict) -> Optional[str]:
    """The part of a request's prompt that its follow-ups repeat from the start, None if it has none."""
    messages = doc.get("messages")
    if messages is None and isinstance(doc.get("input"), list):  # Responses API
        messages = doc["input"]
    if isinstance(messages, list) and messages:
        parts = []
        for m in messages:
            if not isinstance(m, dict):
                continue
            parts.append(f"{m.get('role', '')}\x1f{_text(m.get('content'))}\x1e")
            if m.get("role") == "user":
                break  # the first question: every later turn of this conversation starts with it
        return "".join(parts) or None
    for field in ("prompt", "input"):
        p = doc.get(field)
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            p = p[0]  # a batch: its first prompt
        if isinstance(p, str) and p:
            return p
        if isinstance(p, list) and p and all(isinstance(t, int) for t in p):
            return ",".join(map(str, p))  # token ids
    return None


def affinity_key(path: str, body: bytes, chars: int) -> Optional[str]:
    """The key of a request (see the module's docstring), None when it goes by load alone."""
    if chars <= 0 or not path.startswith(PROMPT_PATHS) or not body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    start = prompt_start(doc)
    if start is None:
        return None
    return f"{doc.get('model', '')}\x00{start[:chars]}"


def score(key: str, member: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{key}\x00{member}".encode()).digest()[:8], "big")


def choose(members: Sequence[Candidate], key: Optional[str], slack: int) -> tuple[Optional[Candidate], str]:
    """The member a request goes to among the eligible ones, and why (ROUTED_AFFINITY or ROUTED_LOAD)."""
    if not members:
        return None, ROUTED_LOAD
    least = min(members, key=lambda m: (m.outstanding, m.requests))
    if key is None:
        return least, ROUTED_LOAD
    affine = max(members, key=lambda m: score(key, m.name))
    if affine.outstanding <= least.outstanding + max(slack, least.outstanding // 2):
        return affine, ROUTED_AFFINITY
    return least, ROUTED_LOAD
