"""`sparkctl fleet status`: every member's `sparkctl status` at once (sparkctl/cluster_status.py
`collect`), one row each, and the fleet's front door as its clients and its members see it."""

from __future__ import annotations

from typing import Optional

from sparkctl import httpclient

DOOR_LIVENESS_PATH = "/liveness"  # vllm-router's own answer: it gives it even with every member down
DOOR_DEADLINE_S = 3.0


def member_health(doc: dict) -> str:
    """One word for a member: serving (/health 200 with the inventory's config running), holding
    (its gateway holds requests: a change under way), stale (serving another config than its
    inventory's), down (the engine does not answer /health 200)."""
    gateway = doc.get("gateway") or {}
    if gateway.get("state") == "holding":
        return "holding"
    if doc["runtime"].get("health") != 200:
        return "down"
    return "serving" if doc["healthy"] else "stale"


def member_row(name: str, doc: Optional[dict], error=None) -> dict:
    """The fleet table's row of one member, from its status document (or the error that stopped it)."""
    if doc is None:
        return {
            "member": name,
            "health": "unreachable",
            "healthy": False,
            "error": error.message if error else None,
            "fix": error.fix if error else None,
            "applied_config_hash": None,
            "config_hash": None,
            "inventory_applied": False,
            "output_tokens_per_s": None,
            "running": None,
            "waiting": None,
            "url": None,
            "status": None,
        }
    r = doc["runtime"]
    return {
        "member": name,
        "health": member_health(doc),
        "healthy": doc["healthy"],
        "error": r.get("error"),
        "applied_config_hash": doc.get("applied_config_hash"),
        "config_hash": doc["config_hash"],
        # the member's inventory file is the config its head records as applied (and saw serving)
        "inventory_applied": doc.get("applied_config_hash") == doc["config_hash"],
        "output_tokens_per_s": r.get("output_tokens_per_s"),
        "running": r.get("running"),
        "waiting": r.get("waiting"),
        "url": r.get("url"),
        "status": doc,
    }


def member_status(member, sample_seconds: float) -> dict:
    from sparkctl.cluster_status import collect
    from sparkctl.launch.plan import render

    return collect(member.inventory, render(member.inventory), sample_seconds)


def door_view(fleet) -> dict:
    """The front door: its URL, whether it answers, and the router's view of each member (passing,
    drained, failing; its health, circuit and requests in flight) from vllm-router itself."""
    from sparkctl.fleet import router_admin

    view: dict = {"url": fleet.front_door_url, **door_answers(fleet)}
    try:
        st = router_admin.status(fleet)
        members = st.get("members") or {}
        view["members"] = {name: m.get("state") for name, m in members.items()}
        view["outstanding"] = {name: m.get("outstanding") for name, m in members.items()}
        view["router"] = {
            name: {k: m.get(k) for k in ("healthy", "circuit", "requests", "errors", "url")} for name, m in members.items()
        }
        view["reasons"] = {name: m["reason"] for name, m in members.items() if m.get("reason")}
    except Exception as err:  # noqa: BLE001 - the members' rows still print
        view["members"] = None
        view["admin_error"] = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
    return view


def door_answers(fleet) -> dict:
    """GET the router's /liveness from here (a client's side), with a deadline."""
    import httpx

    from sparkctl.transport.guard import check_address

    check_address(fleet.front_door_address, "the fleet's front door")
    url = fleet.front_door_url + DOOR_LIVENESS_PATH
    try:
        r = httpclient.get(url, timeout=DOOR_DEADLINE_S)
    except httpx.HTTPError as err:
        return {"answering": False, "error": f"{type(err).__name__}: {err}" if str(err) else type(err).__name__}
    return {"answering": r.status_code == 200, "error": None if r.status_code == 200 else f"HTTP {r.status_code}"}


def fleet_status(fleet, sample_seconds: float = 1.0) -> dict:
    """The fleet's status document (`fleet status --json`): front_door_url, the door's view and a
    row per member, every member read at once and the door beside them."""
    import threading

    from sparkctl.fleet.each import each_member

    door: dict = {}

    def read_door() -> None:
        try:
            door.update(door_view(fleet))
        except Exception as err:  # noqa: BLE001 - e.g. a fenced address: said, not raised
            door.update(
                url=fleet.front_door_url,
                answering=False,
                members=None,
                error=getattr(err, "message", None) or f"{type(err).__name__}: {err}",
            )

    t = threading.Thread(target=read_door, name="sparkctl-fleet-door", daemon=True)
    t.start()
    outcomes = each_member(fleet.members, lambda m: member_status(m, sample_seconds))
    t.join(DOOR_DEADLINE_S * 4 + 10)
    rows = [member_row(name, o.value, o.error) for name, o in outcomes.items()]
    door_states = door.get("members") or {}
    for row in rows:
        row["front_door"] = door_states.get(row["member"])
    return {
        "fleet": fleet.name,
        "front_door_url": fleet.front_door_url,
        "front_door": door,
        "healthy": all(r["healthy"] for r in rows) and bool(door.get("answering")),
        "members": rows,
    }
