"""Every container sparkctl starts runs the process it means, in the images people run.

For each image config (tests/unit/recorded/image_config: vLLM's official image, NVIDIA's NGC vLLM, the
community Spark image; and the lab's recorded one) and every launch (gateway, drafter, worker and
head under Ray and under mp, the fleet's front door): compose what Docker executes from the image's
Entrypoint/Cmd and the rendered `docker run` argv, then execute it with a real /bin/sh, the image's
programs (ray, vllm, python3, NVIDIA's entrypoint script where the image holds one) replaced by stubs
that record their argv and PID. The intended process must be the one left running as the
container's first process (docker stop's SIGTERM reaches it), with NVIDIA's script run first in the
images whose ENTRYPOINT it is.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import yaml
from image_samples import CLASSIC
from test_fleet_router_step import fleet_of

from sparkctl.fleet.router_launch import launch as door_launch
from sparkctl.inventory.models import Inventory
from sparkctl.launch.plan import NVIDIA_ENTRYPOINT, ContainerSpec, render, vllm_serve_args

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).parent / "recorded" / "image_config"


@dataclass(frozen=True)
class Image:
    ref: str
    config: dict  # the `Config` of `docker image inspect`

    @property
    def holds_nvidia_entrypoint(self) -> bool:
        # The script is in the image exactly when the image (or its NGC base) made it the ENTRYPOINT.
        return NVIDIA_ENTRYPOINT in (self.config.get("Entrypoint") or [])


def _images() -> dict[str, Image]:
    found = {p.stem: json.loads(p.read_text()) for p in sorted(CONFIGS.glob("*.json"))}
    images = {name: Image(doc["image"], doc["config"]) for name, doc in found.items()}
    images["lab"] = Image(CLASSIC["RepoTags"][0], CLASSIC["Config"])  # recorded on the lab
    return images


IMAGES = _images()


# --- Docker's part: which argv a `docker run` line executes in an image ------------------------

# The options ContainerSpec.docker_run_argv writes with their value as the next word; every other
# option is one word (-d, --gpus=all, --entrypoint=/bin/sh).
OPTIONS_WITH_A_VALUE = {"--name", "-v", "-e", "--label"}


def executed_argv(config: dict, run_argv: list[str]) -> list[str]:
    """What Docker executes: --entrypoint replaces the image's Entrypoint and clears its Cmd; words
    after the image replace Cmd (docker run reference, "ENTRYPOINT (default command to execute at runtime)")."""
    assert run_argv[:2] == ["docker", "run"], run_argv
    entrypoint: Optional[str] = None
    i = 2
    while run_argv[i].startswith("-"):
        if run_argv[i] in OPTIONS_WITH_A_VALUE:
            i += 2
            continue
        if run_argv[i].startswith("--entrypoint="):
            entrypoint = run_argv[i].split("=", 1)[1]
        i += 1
    after_image = run_argv[i + 1 :]
    if entrypoint is not None:
        return [entrypoint, *after_image]
    return [*(config.get("Entrypoint") or []), *(after_image or config.get("Cmd") or [])]


# --- The container's part: run it, with the image's programs stubbed ---------------------------

STUB = """#!/bin/sh
{ printf '%s\\0' "$$" "${0##*/}" "$@"; printf '\\n'; } >> "$STUB_LOG"
"""
NVIDIA_STUB = STUB + 'exec "$@"\n'  # NVIDIA's script ends the same way, after its entrypoint.d parts


@dataclass(frozen=True)
class Run:
    pid: int  # the container's first process
    calls: list[tuple[int, list[str]]]  # (pid, argv) of each stubbed program, in order

    @property
    def process(self) -> list[str]:
        """The program left as the container's first process (what a `docker stop` signals)."""
        last_pid, last = self.calls[-1] if self.calls else (None, [])
        return last if last_pid == self.pid else []


def run_in_image(image: Image, argv: list[str], tmp: Path) -> Run:
    bin_dir, log = tmp / "bin", tmp / "calls"
    bin_dir.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    for name in ("ray", "vllm", "python3"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    # the image's filesystem: NVIDIA's script where the image holds it, nothing at that path elsewhere
    wrapper = tmp / "nvidia_entrypoint.sh"
    if image.holds_nvidia_entrypoint:
        wrapper.write_text(NVIDIA_STUB)
        wrapper.chmod(0o755)
    argv = [str(wrapper) if a == NVIDIA_ENTRYPOINT else a for a in argv]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log)}
    try:
        proc = subprocess.Popen(argv, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError:  # docker: `exec: "-c": executable file not found in $PATH`
        return Run(pid=-1, calls=[])
    proc.communicate(timeout=30)
    calls = []
    for line in log.read_text().splitlines():
        pid, *words = line.split("\0")[:-1]
        calls.append((int(pid), words))
    return Run(pid=proc.pid, calls=calls)


# --- The launches ------------------------------------------------------------------------------


def lab(image: str, **runtime) -> Inventory:
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["runtime"].update(image=image, **runtime)
    return Inventory.model_validate(data)


def launches(image: str, tmp: Path) -> list[tuple[str, ContainerSpec, Inventory]]:
    """(what it is, its launch, the inventory it came from): every container sparkctl starts."""
    ray, mp = lab(image), lab(image, distributed_executor_backend="mp")
    out = [(c.role, c, ray) for c in render(ray).all_containers]
    out += [(f"{c.role} (mp)", c, mp) for c in render(mp).containers if c.role in ("head", "worker")]
    fleet = fleet_of(tmp, image=image)
    return [*out, ("fleet door", door_launch(fleet), ray)]


def intended(what: str, spec: ContainerSpec, inv: Inventory) -> list[str]:
    """The process each launch means, in the words of vLLM, Ray and sparkctl's own servers."""
    first = {
        "gateway": ["python3", "-m", "sparkctl.gateway"],
        "fleet door": ["python3", "-m", "vllm_router.launch_router"],
        "worker": ["ray", "start", "--block"],
        "drafter": ["vllm", "serve", inv.runtime.speculative.model],
    }.get(what, ["vllm", "serve", inv.runtime.model])
    want = vllm_serve_args(inv) if what == "head" else spec.command
    assert want[: len(first)] == first, (what, want)
    return want


@pytest.mark.parametrize("image_name", sorted(IMAGES))
def test_every_container_runs_its_intended_process_under_the_images_entrypoint(image_name, tmp_path):
    image = IMAGES[image_name]
    for what, spec, inv in launches(image.ref, tmp_path):
        run = run_in_image(image, executed_argv(image.config, spec.docker_run_argv()), tmp_path / what.replace(" ", "-"))
        assert run.process == intended(what, spec, inv), f"{image_name}: {what} runs {run.calls}"
        started = [argv for _, argv in run.calls]
        if image.holds_nvidia_entrypoint:  # NVIDIA's script first, as the image's own ENTRYPOINT would run it
            assert started[0][0] == "nvidia_entrypoint.sh" and run.calls[0][0] == run.pid, (image_name, what, run.calls)
            started = started[1:]
        if what == "head":  # Ray's head first (a child that returns), then vLLM in its place
            ray_start = shlex.split(spec.command[2].split(" && ")[0])
            assert started == [ray_start, run.process], (image_name, run.calls)
        else:
            assert started == [run.process], (image_name, what, run.calls)


def test_without_an_entrypoint_the_images_break_the_launch_as_issue_40_says(tmp_path):
    """The same composition with the `--entrypoint` taken out (main before this change, plus its
    launcher's words): vLLM's image runs `vllm serve -c ... ray start --head ...` and `vllm serve ...
    python3 -m sparkctl.gateway ...`; the lab's image cannot start at all (Docker would execute `-c`)."""

    def run_without_entrypoint(image: Image, spec: ContainerSpec, tmp: Path) -> Run:
        argv = [a for a in spec.docker_run_argv() if not a.startswith("--entrypoint=")]
        return run_in_image(image, executed_argv(image.config, argv), tmp)

    specs = {what: spec for what, spec, _ in launches(IMAGES["vllm-openai-v0.33.0"].ref, tmp_path)}
    head = run_without_entrypoint(IMAGES["vllm-openai-v0.33.0"], specs["head"], tmp_path / "head")
    assert head.process[:3] == ["vllm", "serve", "-c"] and any(a.startswith("ray start --head") for a in head.process)
    gateway = run_without_entrypoint(IMAGES["vllm-openai-v0.33.0"], specs["gateway"], tmp_path / "gateway")
    assert gateway.process[:2] == ["vllm", "serve"] and "sparkctl.gateway" in gateway.process
    assert run_without_entrypoint(IMAGES["lab"], specs["worker"], tmp_path / "worker").calls == []


def test_the_engine_asks_docker_for_the_same_entrypoint_and_command_render_shows():
    """containers.create_args is what `up` sends the Docker engine: the same entrypoint and Cmd as
    the rendered `docker run` line (one translation, so `render` is what runs)."""
    import docker

    from sparkctl.runtime.containers import create_args

    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    for spec in render(lab(IMAGES["vllm-openai-v0.33.0"].ref)).all_containers:
        args = create_args(api, spec)
        run_argv = spec.docker_run_argv()
        image_at = run_argv.index(spec.image)
        assert run_argv[image_at - 1] == f"--entrypoint={args['entrypoint'][0]}" and len(args["entrypoint"]) == 1
        assert args["command"] == run_argv[image_at + 1 :]
