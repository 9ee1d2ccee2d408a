"""vllm-router's wheel for the lab's fleet file (front_door.router.wheel), so the lab ships the
router to its door host as sparkctl ships it to a node without internet (fleet/router_launch.py),
and the lab's image carries only the router's Python requirements, as vLLM's image does.

The lab has no package index at `lab up`, and pip keeps no wheel file of what it installed; so the
wheel is written again from vllm-router's installation in the interpreter running the lab (the
files pip unpacked from the real wheel), once per version, each entry with a fixed date: the same
installation gives the same bytes, so the door's content-addressed copy is made once per lab host.
"""

from __future__ import annotations

import platform
import zipfile
from pathlib import Path

FIXED_DATE = (2020, 1, 1, 0, 0, 0)


def router_wheel(folder: Path) -> Path:
    """The wheel in `folder` (written when absent), named as vllm-router's wheels are."""
    import importlib.metadata as md

    dist = md.distribution("vllm-router")
    path = folder / f"vllm_router-{dist.version}-cp38-abi3-manylinux_2_28_{platform.machine()}.whl"
    if path.is_file():
        return path
    tmp = path.with_suffix(".whl.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(dist.files or [], key=str):
            src = Path(dist.locate_file(f))
            if "__pycache__" not in f.parts and ".." not in f.parts and src.is_file():
                info = zipfile.ZipInfo(str(f), FIXED_DATE)
                info.external_attr = (src.stat().st_mode & 0o777) << 16
                z.writestr(info, src.read_bytes())
    tmp.replace(path)
    return path
