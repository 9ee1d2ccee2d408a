"""The lab registry serves the runtime image, and a host pulls it over the management net."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

pytestmark = pytest.mark.lab


def test_registry_serves_the_image(lab):
    from sparkctl_lab.topology import IMAGE_REPO, IMAGE_TAG

    catalog = httpx.get("http://10.231.0.1:5000/v2/_catalog", timeout=5).json()
    assert IMAGE_REPO in catalog["repositories"]
    m = httpx.get(
        f"http://10.231.0.1:5000/v2/{IMAGE_REPO}/manifests/{IMAGE_TAG}",
        timeout=5,
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    assert m.status_code == 200 and m.headers["docker-content-digest"].startswith("sha256:")


def test_a_host_pulls_the_image_and_runs_the_entrypoints(lab):
    image = lab.IMAGE
    lab.host_exec("offload", ["docker", "rmi", "-f", image])
    r = lab.host_exec("offload", ["docker", "pull", image], timeout=120)
    assert r.returncode == 0, r.stderr
    inspect = json.loads(lab.host_exec("offload", ["docker", "image", "inspect", image]).stdout)[0]
    assert any(d.startswith("10.231.0.1:5000/sparkctl/vllm-sim@sha256:") for d in inspect["RepoDigests"])
    assert "PYTHONPATH=/opt/sparkctl" in inspect["Config"]["Env"]
    r = lab.host_exec(
        "offload",
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "host",
            image,
            "sh",
            "-c",
            "cat /usr/local/bin/vllm /usr/local/bin/ray; python3 -c 'import http.server, "
            'ssl, json, asyncio, sqlite3; print("stdlib ok")\'',
        ],
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert 'exec python3 -m sparkctl_lab.sim.vllm_cli "$@"' in r.stdout
    assert 'exec python3 -m sparkctl_lab.sim.ray_cli "$@"' in r.stdout
    assert "stdlib ok" in r.stdout


def test_the_image_ships_its_bytecode_so_a_start_compiles_nothing(lab):
    # a container's writable layer goes with it: without the image's own .pyc files every engine,
    # drafter and gateway start compiled what it imported again (~0.3 s of the simulator's start)
    image, name = lab.IMAGE, "sparkctl-bytecode-probe"
    lab.host_exec("offload", ["docker", "pull", image], timeout=120)
    lab.host_exec("offload", ["docker", "rm", "-f", name])
    imports = "import sparkctl_lab.sim.server, sparkctl_lab.sim.vllm_cli, aiohttp, fastapi, uvicorn, huggingface_hub"
    try:
        r = lab.host_exec("offload", ["docker", "run", "--name", name, "--network", "none", image, "python3", "-c", imports],
                          timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        diff = lab.host_exec("offload", ["docker", "diff", name], check=True).stdout.splitlines()
        assert not [line for line in diff if line.endswith(".pyc")], diff[:20]
    finally:
        lab.host_exec("offload", ["docker", "rm", "-f", name])


def test_the_runner_docker_cli_sees_the_same_engine_as_the_host(lab):
    lab.host_exec("offload", ["docker", "pull", lab.IMAGE], timeout=120)
    r = subprocess.run(
        ["docker", "-H", f"unix://{lab.docker_socket('offload')}", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert lab.IMAGE in r.stdout.split()
