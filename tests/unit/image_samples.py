"""`docker image inspect` samples of one image under both image stores (tests/unit/recorded/image_store:
the classic one recorded on the lab, the containerd ones derived from moby's source, each file
naming its source), and the probe sections a node with each would answer."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from sparkctl.facts.probe import Section

REC = Path(__file__).parent / "recorded" / "image_store"


def sample(name: str) -> dict:
    """The one inspect document of recorded/image_store/<name>.json."""
    return json.loads(json.loads((REC / f"{name}.json").read_text())["out"])[0]


CLASSIC = sample("classic-inspect")  # Debian 20.10, overlay2: Id = the config digest
CONTAINERD = sample("containerd-inspect-docker29")  # Docker 29: Id = the manifest digest, Descriptor
CONTAINERD_26 = sample("containerd-inspect-docker26")  # Docker 26: Id = the manifest digest, GraphDriver overlayfs


def rebuilt(doc: dict, what: str = "rebuilt by hand") -> dict:
    """The same document for another image under the same tag: one more layer, so another config
    digest (classic Id) or manifest digest (containerd Id)."""
    out = copy.deepcopy(doc)
    layer = "sha256:" + hashlib.sha256(what.encode()).hexdigest()
    out["RootFS"]["Layers"] = [*out["RootFS"]["Layers"], layer]
    out["Id"] = "sha256:" + hashlib.sha256((doc["Id"] + layer).encode()).hexdigest()
    if out.get("Descriptor"):
        out["Descriptor"]["digest"] = out["Id"]
    return out


def inspect_section(doc: dict | None, ref: str) -> Section:
    """What the image probe answers: the CLI's inspect array, or docker's error for a missing image."""
    if doc is None:
        return Section(1, f"[]\nError: No such image: {ref}\n")
    return Section(0, json.dumps([doc], indent=4) + "\n")
