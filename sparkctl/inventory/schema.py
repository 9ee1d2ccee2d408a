"""The inventory's JSON Schema (from the pydantic models), for editors to complete and check files.

Use it from YAML with a modeline, e.g. for the yaml-language-server:
`# yaml-language-server: $schema=inventory.schema.json` after `sparkctl inventory schema > inventory.schema.json`.
Cross-field rules (one head, peers that agree, ...) are beyond JSON Schema: `sparkctl inventory validate` runs them.
"""

from __future__ import annotations


def inventory_schema() -> dict:
    from sparkctl.inventory.models import Inventory

    doc = Inventory.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sparkctl inventory",
        "description": (
            "One DGX Spark cluster for sparkctl: hosts (head, worker, offload), fabric links, the vLLM runtime, "
            "caches and Engram placement. Cross-field rules are checked by `sparkctl inventory validate`."
        ),
        **{k: v for k, v in doc.items() if k not in ("title", "description")},
    }
