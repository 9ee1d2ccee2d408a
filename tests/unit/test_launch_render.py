"""The launch renderer: pure, deterministic, and only flags the real vLLM accepts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from sparkctl.inventory.models import Inventory
from sparkctl.launch.plan import render

ROOT = Path(__file__).resolve().parents[2]

# Flags reference/vllm-interface.md lists for `vllm serve` (the contract; never invent one).
VLLM_SERVE_FLAGS = {
    "--tensor-parallel-size", "--distributed-executor-backend", "--kv-cache-dtype", "--block-size",
    "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens",
    "--speculative-config", "--moe-backend", "--served-model-name", "--host", "--port",
    "--shutdown-timeout", "--nnodes", "--node-rank", "--master-addr", "--headless",
}  # fmt: skip


def load(name: str = "lab.yaml", **runtime_changes) -> Inventory:
    data = yaml.safe_load((ROOT / "inventories" / name).read_text())
    data["runtime"].update(runtime_changes)
    return Inventory.model_validate(data)


def serve_argv(spec) -> list[str]:
    if spec.command[0] == "/bin/sh":
        line = spec.command[2].split("&& exec ", 1)[1]
        return shlex.split(line)
    return spec.command


def test_start_order_is_drafter_worker_head():
    plan = render(load())
    assert [(c.host, c.role) for c in plan.containers] == [
        ("offload", "drafter"),
        ("worker", "worker"),
        ("head", "head"),
    ]


def test_rendering_is_pure_and_deterministic():
    assert render(load()).model_dump() == render(load()).model_dump()


@pytest.mark.parametrize("role", ["head", "drafter"])
def test_only_real_vllm_flags(role):
    plan = render(load())
    spec = next(c for c in plan.containers if c.role == role)
    argv = serve_argv(spec)
    assert argv[:2] == ["vllm", "serve"]
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= VLLM_SERVE_FLAGS, flags - VLLM_SERVE_FLAGS


def test_head_serve_line_carries_the_inventory():
    inv = load()
    argv = serve_argv(render(inv).for_host("head")[0])
    opts = dict(zip(argv[3::2], argv[4::2]))
    r = inv.runtime
    assert argv[2] == r.model
    assert opts["--tensor-parallel-size"] == "2"
    assert opts["--distributed-executor-backend"] == "ray"
    assert opts["--kv-cache-dtype"] == r.kv_cache_dtype
    assert opts["--max-model-len"] == str(r.max_model_len)
    assert opts["--max-num-seqs"] == str(r.max_num_seqs)
    assert opts["--moe-backend"] == "flashinfer_b12x"
    assert opts["--shutdown-timeout"] == str(r.shutdown_timeout)
    spec = json.loads(opts["--speculative-config"])
    assert spec["num_speculative_tokens"] == r.speculative.num_speculative_tokens
    assert spec["method"] == r.speculative.method


def test_worker_joins_head_over_the_fabric():
    plan = render(load())
    worker = plan.for_host("worker")[0]
    assert "--address=10.231.100.2:6379" in worker.command
    assert "--node-ip-address=10.231.100.3" in worker.command
    head = plan.for_host("head")[0]
    assert "--node-ip-address=10.231.100.2" in head.command[2]


def test_fabric_env_names_interface_and_both_rdma_twins():
    plan = render(load())
    for host in ("head", "worker"):
        env = plan.for_host(host)[0].env
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
        assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
        assert env["VLLM_HOST_IP"] == env["RAY_NODE_IP_ADDRESS"]
        assert env["RAY_memory_monitor_refresh_ms"] == "0"
        assert "NCCL_IB_GID_INDEX" not in env  # never pinned blindly


def test_containers_get_host_network_ipc_gpus_rdma_and_cache_volume():
    inv = load()
    for c in render(inv).containers:
        assert (c.network_mode, c.ipc_mode, c.gpus) == ("host", "host", "all")
        assert c.devices == ["/dev/infiniband"]
        assert c.ulimits == {"memlock": inv.runtime.memlock}
        cache = [m for m in c.mounts if m.target == inv.caches.container_path]
        assert cache and cache[0].source == inv.caches.host_path
        assert c.env["VLLM_CACHE_ROOT"] == inv.caches.container_path


def test_config_hash_follows_the_config():
    base = render(load()).config_hash
    assert render(load(max_num_seqs=2)).config_hash != base
    assert render(load(served_model_name="other")).config_hash != base
    plan = render(load())
    labels = {c.role: c.labels["io.sparkctl.config-hash"] for c in plan.containers}
    # one hash per restart group: the engine (head + worker) restarts together, the drafter alone
    assert labels == {
        "head": plan.group_hashes["engine"],
        "worker": plan.group_hashes["engine"],
        "drafter": plan.group_hashes["drafter"],
    }
    assert all(plan.expected_hash(c.name) == c.labels["io.sparkctl.config-hash"] for c in plan.containers)


def test_a_head_only_flag_changes_the_engine_hash_and_not_the_drafters():
    base, other = render(load()), render(load(served_model_name="other"))
    assert other.group_hashes["engine"] != base.group_hashes["engine"]
    assert other.group_hashes["drafter"] == base.group_hashes["drafter"]


def test_head_learns_the_remote_drafter_address():
    head = render(load()).for_host("head")[0]
    assert head.env["SPLICE_DRAFTER_URL"] == "http://10.231.110.4:8100"


def test_drafter_spans_the_offload_hosts_gpus():
    drafter = render(load()).for_host("offload")[0]
    argv = serve_argv(drafter)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert drafter.env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_real_clusters_get_unlimited_memlock_for_rdma():
    for c in render(load("dspark-recipe.yaml")).containers:
        assert c.ulimits == {"memlock": -1}


# ---- the mp executor (vLLM's multi-node multiprocessing, no Ray) ----------------------------------


def mp_argv(inv: Inventory, role: str) -> list[str]:
    return next(c for c in render(inv).containers if c.role == role).command


def test_mp_renders_the_two_vllm_serve_lines_and_no_ray():
    inv = load(distributed_executor_backend="mp")
    head, worker = mp_argv(inv, "head"), mp_argv(inv, "worker")
    assert head[:2] == worker[:2] == ["vllm", "serve"] and "ray" not in " ".join(head + worker).split()
    tail = ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.231.100.2", "--master-port", "29501"]
    assert head[-8:] == tail
    assert worker[-9:] == tail[:3] + ["1"] + tail[4:] + ["--headless"]
    assert head[:-8] == worker[:-9]  # the same engine line on both nodes (each builds the whole config)
    assert head[head.index("--distributed-executor-backend") + 1] == "mp"
    for c in render(inv).containers:
        if c.role != "drafter":  # the drafter is no part of the engine: it keeps its env (and keeps running)
            assert not [k for k in c.env if k.startswith("RAY_")], c.env


def test_mp_master_address_is_the_heads_fabric_ip_never_the_management_net():
    inv = load(distributed_executor_backend="mp", master_port=29555)
    head_argv = mp_argv(inv, "head")
    master = head_argv[head_argv.index("--master-addr") + 1]
    assert master == str(next(link for link in inv.hosts["head"].fabric if link.peer == "worker").address.ip)
    assert master != inv.hosts["head"].ssh.address
    assert mp_argv(inv, "worker")[mp_argv(inv, "worker").index("--master-port") + 1] == "29555"


def test_switching_the_executor_changes_the_engine_group_only():
    ray_plan, mp_plan = render(load()), render(load(distributed_executor_backend="mp"))
    assert ray_plan.group_hashes["engine"] != mp_plan.group_hashes["engine"]
    assert ray_plan.group_hashes["drafter"] == mp_plan.group_hashes["drafter"]
    assert [(c.host, c.role) for c in mp_plan.containers] == [("offload", "drafter"), ("worker", "worker"), ("head", "head")]


@pytest.mark.parametrize("seed", ["lab.yaml", "dspark-recipe.yaml", "splice-build.yaml"])
@pytest.mark.parametrize("backend", ["ray", "mp"])
def test_every_rendered_vllm_serve_line_parses_with_vllm_033s_parser(seed, backend):
    """The simulator's parser is the vendored copy of vLLM 0.33's `vllm serve` parser (flags, types,
    choices: lab/sparkctl_lab/sim/serve_args.py) and its launch checks (serve.py's --headless one,
    arg_utils.py's --nnodes/--node-rank ones, parallel.py's executor one); every line parses, passes
    them and means what the inventory says."""
    from sparkctl_lab.sim import serve_args

    inv = load(seed, distributed_executor_backend=backend)
    lines = [(c, serve_argv(c)) for c in render(inv).containers if serve_argv(c)[:2] == ["vllm", "serve"]]
    assert {c.role for c, _ in lines} >= ({"head", "worker"} if backend == "mp" else {"head"})
    for spec, argv in lines:
        cfg = serve_args.parse(argv[2:])
        serve_args.check_headless(cfg)
        serve_args.validate_multinode(cfg)
        if spec.role == "drafter":
            continue
        r = inv.runtime
        assert (cfg.model, cfg.tensor_parallel_size, cfg.distributed_executor_backend) == (
            r.model,
            r.tensor_parallel_size,
            backend,
        )
        assert (cfg.max_model_len, cfg.max_num_seqs, cfg.kv_cache_dtype) == (r.max_model_len, r.max_num_seqs, r.kv_cache_dtype)
        if backend == "mp":
            assert (cfg.nnodes, cfg.node_rank, cfg.headless) == (2, 0 if spec.role == "head" else 1, spec.role == "worker")
            head, worker = inv.hosts_with_role("head")[0], inv.hosts_with_role("worker")[0]
            link = next(link for link in inv.hosts[head].fabric if link.peer == worker)
            assert (cfg.master_addr, cfg.master_port) == (str(link.address.ip), r.master_port)
        else:
            assert (cfg.nnodes, cfg.headless) == (1, False)


def test_cuda_jit_cache_and_torch_extensions_live_on_the_volume_with_a_cap():
    # GB10 is sm_121: kernels shipped as PTX only are JIT-compiled by the driver at load; its cache
    # (default ~/.nv/ComputeCache in the container, 256 MiB) would be lost with every container
    inv = load()
    root = inv.caches.container_path
    for c in render(inv).containers:
        assert c.env["CUDA_CACHE_PATH"] == f"{root}/cuda_cache"
        assert c.env["CUDA_CACHE_MAXSIZE"] == str(4 << 30)  # the driver's largest cap
        assert c.env["TORCH_EXTENSIONS_DIR"] == f"{root}/torch_extensions"
        assert any(m.target == root and m.source == inv.caches.host_path for m in c.mounts)
    # the inventory's runtime.env still has the last word
    moved = render(load(env={"CUDA_CACHE_MAXSIZE": "1073741824"}))
    assert all(c.env["CUDA_CACHE_MAXSIZE"] == "1073741824" for c in moved.containers)


def test_one_launch_per_inventory_object_for_as_long_as_it_lives():
    """render() is the one cache (a run's RunContext.launch and doctor's Context.plan read it): the
    same object for one inventory, a copy renders its own, and the cache keeps no inventory alive
    (it used to hold every inventory a process rendered, keyed by id(), for the process's life)."""
    import gc
    import weakref

    from sparkctl.checks.base import Context
    from sparkctl.steps.base import RunContext

    inv = load()
    plan = render(inv)
    assert RunContext(inventory=inv, fleet=None).launch is plan
    assert Context(inventory=inv, hosts=list(inv.hosts), facts={}).plan is plan
    changed = inv.model_copy(update={"runtime": inv.runtime.model_copy(update={"port": 8001})})
    assert render(changed).config_hash != plan.config_hash

    gone = weakref.ref(inv)
    del inv, changed
    gc.collect()
    assert gone() is None, "render() keeps the inventory alive"
    # the cache is emptied as inventories go (so an id reused later cannot find a stale plan)
    from sparkctl.launch import plan as launch

    held = len(launch._RENDERED)
    hashes = {render(load(port=port)).config_hash for port in range(8002, 8022)}
    gc.collect()
    assert len(hashes) == 20 and len(launch._RENDERED) <= held
