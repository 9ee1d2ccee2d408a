"""The fleet door's routing decision (sparkctl/fleetdoor/routing.py) on its own: the key a request
gets, and rendezvous hashing's promise that a member leaving moves only its own keys."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkctl.fleetdoor.routing import ROUTED_AFFINITY, ROUTED_LOAD, affinity_key, choose


@dataclass
class M:
    name: str
    outstanding: int = 0
    requests: int = 0


def chat(*messages: tuple[str, str], model: str = "m") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": r, "content": c} for r, c in messages]}).encode()


def test_a_conversations_turns_share_a_key_and_other_conversations_do_not():
    first = affinity_key("/v1/chat/completions", chat(("system", "terse"), ("user", "hi")), 2048)
    later = affinity_key(
        "/v1/chat/completions", chat(("system", "terse"), ("user", "hi"), ("assistant", "hello"), ("user", "more")), 2048
    )
    assert first is not None and first == later
    assert affinity_key("/v1/chat/completions", chat(("system", "terse"), ("user", "bye")), 2048) != first
    assert affinity_key("/v1/chat/completions", chat(("system", "terse"), ("user", "hi"), model="other"), 2048) != first
    # a completion: the prompt's first characters; a list of parts counts its text
    long = "x" * 3000
    assert affinity_key("/v1/completions", json.dumps({"prompt": long + "a"}).encode(), 2048) == affinity_key(
        "/v1/completions", json.dumps({"prompt": long + "b"}).encode(), 2048
    )
    parts = json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}).encode()
    assert affinity_key("/v1/chat/completions", parts, 2048) == affinity_key(
        "/v1/chat/completions", chat(("user", "hi"), model=""), 2048
    )
    # no prompt, or affinity off: by load alone
    assert affinity_key("/v1/models", b"", 2048) is None
    assert affinity_key("/v1/chat/completions", b"not json", 2048) is None
    assert affinity_key("/v1/chat/completions", chat(("user", "hi")), 0) is None


def test_a_member_that_leaves_moves_only_its_own_keys_and_wins_them_back():
    members = [M("lab"), M("lab-2"), M("lab-3")]
    keys = [f"m\x00conversation {i}" for i in range(300)]
    home = {k: choose(members, k, slack=2)[0].name for k in keys}
    assert set(home.values()) == {"lab", "lab-2", "lab-3"}
    without = {k: choose([m for m in members if m.name != "lab-2"], k, slack=2)[0].name for k in keys}
    moved = [k for k in keys if home[k] != without[k]]
    assert moved and all(home[k] == "lab-2" for k in moved)  # only lab-2's keys moved
    assert {k: choose(members, k, slack=2)[0].name for k in keys} == home  # back: each key home again


def test_bounded_load_the_affine_member_keeps_a_key_until_it_clearly_has_more():
    a, b = M("lab"), M("lab-2")
    key = next(f"k{i}" for i in range(100) if choose([a, b], f"k{i}", 2)[0] is a)  # a key whose home is lab
    assert choose([a, b], key, 2) == (a, ROUTED_AFFINITY)
    a.outstanding = 2
    assert choose([a, b], key, 2) == (a, ROUTED_AFFINITY)  # 2 more than lab-2: within the slack
    a.outstanding = 3
    assert choose([a, b], key, 2) == (b, ROUTED_LOAD)
    a.outstanding, b.outstanding = 15, 10  # half the least loaded's count (5) is the slack here
    assert choose([a, b], key, 2) == (a, ROUTED_AFFINITY)
    a.outstanding = 16
    assert choose([a, b], key, 2) == (b, ROUTED_LOAD)
    assert choose([a, b], None, 2) == (b, ROUTED_LOAD)  # no key: the least loaded
    assert choose([], key, 2) == (None, ROUTED_LOAD)
