"""Every validation rule, as an operator meets it: a small broken inventory, `sparkctl inventory validate`,
exit 2, and a message naming the file and the field path to fix."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from climain import run

BASE = """
cluster: {name: rules}
hosts:
  head:
    role: head
    ssh: {address: 192.168.1.11}
    gpu: {model: NVIDIA GB10}
    fabric:
      - {device: enp1s0f0np0, rdma: [rocep1s0f0, roceP2p1s0f0], address: 192.168.200.2/24, mtu: 9000, speed_gbps: 200, peer: worker}
      - {device: enp1s0f1np1, rdma: [rocep1s0f1], address: 192.168.210.2/24, mtu: 9000, speed_gbps: 40, peer: offload}
  worker:
    role: worker
    ssh: {address: 192.168.1.12}
    gpu: {model: NVIDIA GB10}
    fabric:
      - {device: enp1s0f0np0, rdma: [rocep1s0f0, roceP2p1s0f0], address: 192.168.200.3/24, mtu: 9000, speed_gbps: 200, peer: head}
      - {device: enp1s0f1np1, rdma: [rocep1s0f1], address: 192.168.211.3/24, mtu: 9000, speed_gbps: 40, peer: offload}
  offload:
    role: offload
    ssh: {address: 192.168.1.13}
    gpu: {model: NVIDIA GeForce RTX 3090, count: 2}
    memory_gib: 503
    fabric:
      - {device: enp65s0f0np0, address: 192.168.210.4/24, mtu: 9000, speed_gbps: 40, peer: head}
      - {device: enp65s0f1np1, address: 192.168.211.4/24, mtu: 9000, speed_gbps: 40, peer: worker}
runtime:
  image: registry.local/vllm:1
  model: /models/m
  served_model_name: m
  tensor_parallel_size: 2
  kv_cache_dtype: fp8_ds_mla
  gpu_memory_utilization: 0.85
  max_model_len: 327680
  max_num_seqs: 4
  max_num_batched_tokens: 8192
  kv_pool_tokens: 1930000
  moe_backend: flashinfer_b12x
  speculative: {method: draft_model, model: /models/drafter, num_speculative_tokens: 5, drafter_host: offload}
  env: {SOME_FLAG: "1"}
engram: {host: offload, source: /srv/engram, size_gib: 220, target: /mnt/engram, min_free_gib: 230}
"""


def base() -> dict:
    return yaml.safe_load(BASE)


def write(tmp_path, data: dict, name: str = "cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_base_inventory_is_valid(tmp_path, capsys):
    code, out, err = run(["inventory", "validate", str(write(tmp_path, base())), "--file-only"], capsys)
    assert code == 0, err
    assert "ok" in out and "Traceback" not in err


def _set(path: str, value):
    """A mutation that sets a dotted path (list items as [i]) to value, or deletes it when value is DELETE."""

    def apply(d: dict) -> None:
        parts = path.replace("[", ".").replace("]", "").split(".")
        node = d
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node[p]
        last = parts[-1]
        key = int(last) if last.isdigit() else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = value

    return apply


DELETE = object()


def _seq(*mutations):
    def apply(d):
        for m in mutations:
            m(d)

    return apply


def _hosts_without(name):
    def apply(d):
        del d["hosts"][name]
        for h in d["hosts"].values():
            h["fabric"] = [f for f in h["fabric"] if f["peer"] != name]
        d["runtime"]["speculative"].pop("drafter_host", None)
        d.pop("engram", None)

    return apply


# (id, mutation, field path the message must name, words it must contain)
RULES = [
    ("two-heads", _set("hosts.worker.role", "head"), "hosts.worker.role", "exactly one host has role head"),
    ("no-head", _set("hosts.head.role", "worker"), "hosts:", "no host has role head"),
    ("no-worker", _set("hosts.worker.role", "offload"), "hosts:", "at least one worker"),
    ("tp-vs-sparks", _set("runtime.tensor_parallel_size", 4), "runtime.tensor_parallel_size", "number of Sparks (2)"),
    ("tp-three-sparks", _set("hosts.offload.role", "worker"), "runtime.tensor_parallel_size", "3 Sparks"),
    (
        "mp-nnodes-not-dividing-world",
        _seq(_set("runtime.distributed_executor_backend", "mp"), _set("runtime.tensor_parallel_size", 3)),
        "runtime.distributed_executor_backend",
        "`--nnodes 2` must evenly divide the total world size (3)",
    ),
    (
        "mp-ranks-above-gpus",
        _seq(_set("runtime.distributed_executor_backend", "mp"), _set("runtime.tensor_parallel_size", 4)),
        "hosts.worker.gpu.count",
        "mp puts 2 rank(s) on every node",
    ),
    (
        "mp-master-port-is-api-port",
        _seq(_set("runtime.distributed_executor_backend", "mp"), _set("runtime.master_port", 8000)),
        "runtime.master_port",
        "is the API port (8000) too",
    ),
    (
        "executor-unknown",
        _set("runtime.distributed_executor_backend", "nccl"),
        "runtime.distributed_executor_backend",
        "must be one of ray, mp",
    ),
    ("peer-unknown", _set("hosts.head.fabric[0].peer", "wroker"), "hosts.head.fabric[0].peer", "did you mean 'worker'"),
    ("peer-itself", _set("hosts.head.fabric[0].peer", "head"), "hosts.head.fabric[0].peer", "this host itself"),
    (
        "peer-no-link-back",
        _set("hosts.offload.fabric", [{"device": "eth9", "address": "192.168.210.4/24", "speed_gbps": 40, "peer": "head"}]),
        "hosts.worker.fabric[1].peer",
        "has no fabric link with peer: worker",
    ),
    (
        "peer-other-subnet",
        _set("hosts.worker.fabric[0].address", "192.168.201.3/24"),
        "hosts.head.fabric[0].address",
        "same subnet",
    ),
    (
        "peer-other-prefix",
        _set("hosts.worker.fabric[0].address", "192.168.200.3/16"),
        "hosts.head.fabric[0].address",
        "same subnet",
    ),
    (
        "peer-names-someone-else",
        _seq(_set("hosts.worker.fabric[0].peer", "offload")),
        "hosts.head.fabric[0].peer",
        "names peer 'offload', not 'head'",
    ),
    (
        "same-address-both-ends",
        _set("hosts.worker.fabric[0].address", "192.168.200.2/24"),
        "hosts.head.fabric[0].address",
        "different addresses",
    ),
    ("mtu-mismatch", _set("hosts.worker.fabric[0].mtu", 1500), "hosts.head.fabric[0].mtu", "both ends must match"),
    ("speed-mismatch", _set("hosts.offload.fabric[0].speed_gbps", 100), "hosts.head.fabric[1].speed_gbps", "one speed"),
    (
        "dup-ssh-address",
        _set("hosts.worker.ssh.address", "192.168.1.11"),
        "hosts.worker.ssh.address",
        "also the SSH address of 'head'",
    ),
    (
        "dup-fabric-address",
        _set("hosts.offload.fabric[1].address", "192.168.200.3/24"),
        "hosts.offload.fabric[1].address",
        "already the address of hosts.worker.fabric[0]",
    ),
    (
        "ssh-is-fabric-of-other",
        _set("hosts.offload.ssh.address", "192.168.200.2"),
        "hosts.head.fabric[0].address",
        "SSH address of 'offload'",
    ),
    (
        "dup-device",
        _set("hosts.head.fabric[1].device", "enp1s0f0np0"),
        "hosts.head.fabric[1].device",
        "already used by fabric[0]",
    ),
    ("dup-rdma", _set("hosts.head.fabric[1].rdma", ["rocep1s0f0"]), "hosts.head.fabric[1].rdma", "already listed on fabric[0]"),
    (
        "network-address",
        _set("hosts.head.fabric[0].address", "192.168.200.0/24"),
        "hosts.head.fabric[0].address",
        "network address",
    ),
    (
        "head-not-linked-to-worker",
        _seq(
            _set(
                "hosts.head.fabric",
                [{"device": "enp1s0f1np1", "address": "192.168.210.2/24", "speed_gbps": 40, "peer": "offload"}],
            ),
            _set(
                "hosts.worker.fabric",
                [{"device": "enp1s0f1np1", "address": "192.168.211.3/24", "speed_gbps": 40, "peer": "offload"}],
            ),
        ),
        "hosts.head.fabric:",
        "no link to worker 'worker'",
    ),
    (
        "drafter-host-unknown",
        _set("runtime.speculative.drafter_host", "ofload"),
        "runtime.speculative.drafter_host",
        "did you mean 'offload'",
    ),
    (
        "drafter-host-not-offload",
        _set("runtime.speculative.drafter_host", "worker"),
        "runtime.speculative.drafter_host",
        "role offload",
    ),
    ("drafter-host-no-gpu", _set("hosts.offload.gpu", DELETE), "runtime.speculative.drafter_host", "no gpu declared"),
    (
        "draft-tp-above-gpus",
        _set("runtime.speculative.draft_tensor_parallel_size", 4),
        "runtime.speculative.draft_tensor_parallel_size",
        "has 2 GPU(s)",
    ),
    (
        "drafter-needs-model",
        _set("runtime.speculative.model", DELETE),
        "runtime.speculative.model",
        "separate drafter checkpoint",
    ),
    ("engram-host-unknown", _set("engram.host", "ofload"), "engram.host", "not a host in this inventory"),
    ("engram-host-not-offload", _set("engram.host", "head"), "engram.host", "role offload"),
    ("engram-free-below-size", _set("engram.min_free_gib", 100), "engram.min_free_gib", "less than the tables need"),
    ("engram-free-above-ram", _set("engram.min_free_gib", 600), "engram.min_free_gib", "more than 'offload' has"),
    ("batched-below-seqs", _set("runtime.max_num_batched_tokens", 2), "runtime.max_num_batched_tokens", "below max_num_seqs (4)"),
    ("context-above-pool", _set("runtime.kv_pool_tokens", 100000), "runtime.max_model_len", "not a context window"),
    ("moe-typo", _set("runtime.moe_backend", "flashinfer_b21x"), "runtime.moe_backend", "did you mean 'flashinfer_b12x'"),
    ("kv-dtype-typo", _set("runtime.kv_cache_dtype", "nvfp4_ds_mal"), "runtime.kv_cache_dtype", "did you mean 'nvfp4_ds_mla'"),
    ("spec-method-typo", _set("runtime.speculative.method", "eagel3"), "runtime.speculative.method", "did you mean 'eagle3'"),
    ("per-node-env", _set("runtime.env", {"VLLM_HOST_IP": "192.168.200.2"}), "runtime.env.VLLM_HOST_IP", "set per node"),
    # Single keys (pydantic), as the operator reads them.
    (
        "unknown-key",
        _seq(_set("runtime.max_num_seq", 4), _set("runtime.max_num_seqs", DELETE)),
        "runtime.max_num_seq",
        "did you mean 'max_num_seqs'",
    ),
    ("unknown-nested-key", _set("hosts.worker.fabric[0].mtuu", 9000), "hosts.worker.fabric[0].mtuu", "did you mean 'mtu'"),
    (
        "key-in-wrong-section",
        _set("runtime.speculative.max_num_seqs", 1),
        "runtime.speculative.max_num_seqs",
        "it is a key of runtime",
    ),
    (
        "wrong-type-int",
        _set("hosts.worker.fabric[0].mtu", "jumbo"),
        "hosts.worker.fabric[0].mtu",
        "expected a whole number, got the text 'jumbo'",
    ),
    ("wrong-type-mapping", _set("hosts.worker.ssh", "192.168.1.12"), "hosts.worker.ssh", "expected a mapping with keys address"),
    ("wrong-type-list", _set("hosts.worker.fabric", "enp1s0f0np0"), "hosts.worker.fabric", "expected a list"),
    ("boolean-for-number", _set("runtime.max_num_seqs", True), "runtime.max_num_seqs", "boolean true"),
    ("boolean-in-env", _set("runtime.env", {"FLAG": True}), "runtime.env.FLAG", "quote it"),
    ("role-typo", _set("hosts.worker.role", "wroker"), "hosts.worker.role", "did you mean 'worker'"),
    (
        "address-without-prefix",
        _set("hosts.worker.fabric[0].address", "192.168.200.3"),
        "hosts.worker.fabric[0].address",
        "192.168.200.3/24",
    ),
    (
        "address-garbage",
        _set("hosts.worker.fabric[0].address", "192.168.300.3/24"),
        "hosts.worker.fabric[0].address",
        "IPv4 address",
    ),
    ("mtu-range", _set("hosts.worker.fabric[0].mtu", 90000), "hosts.worker.fabric[0].mtu", "must be <= 9216"),
    ("max-model-len-auto", _set("runtime.max_model_len", "auto"), "runtime.max_model_len", "sparkctl needs the number"),
    ("max-model-len-junk", _set("runtime.max_model_len", "lots"), "runtime.max_model_len", "not a token count"),
    ("relative-cache-path", _set("caches", {"host_path": "cache"}), "caches.host_path", "absolute path"),
    ("home-cache-path", _set("caches", {"host_path": "/home/$USER/cache"}), "caches.host_path", "no ~ or $VARIABLES"),
    (
        "host-name",
        _set("hosts", {**base()["hosts"], "bad name": base()["hosts"]["offload"]}),
        "hosts['bad name']",
        "is not allowed",
    ),
    ("missing-section", _set("runtime", DELETE), "runtime:", "required key is missing"),
    ("missing-key", _set("runtime.image", DELETE), "runtime.image:", "required key is missing"),
    ("empty-text", _set("runtime.image", ""), "runtime.image", "must not be empty"),
]


@pytest.mark.parametrize("mutate, field, words", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rule(tmp_path, capsys, mutate, field, words):
    data = copy.deepcopy(base())
    mutate(data)
    path = write(tmp_path, data)

    code, out, err = run(["inventory", "validate", str(path)], capsys)

    assert code == 2
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if field in line]
    assert lines, f"no line names {field!r}:\n{err}"
    assert any(str(path) in line and words in line for line in lines), err


@pytest.mark.parametrize(
    "mutate, field, words", [r[1:] for r in RULES[:6] + RULES[36:39]], ids=[r[0] for r in RULES[:6] + RULES[36:39]]
)
def test_rule_json(tmp_path, capsys, mutate, field, words):
    data = copy.deepcopy(base())
    mutate(data)
    path = write(tmp_path, data)

    code, out, err = run(["inventory", "validate", str(path), "--json"], capsys)

    assert code == 2
    doc = json.loads(out)  # exactly one JSON document
    assert doc["exit_code"] == 2
    assert any(p["file"] == str(path) and words in p["message"] for p in doc["problems"]), doc


def test_all_problems_reported_at_once(tmp_path, capsys):
    data = base()
    data["hosts"]["worker"]["fabric"][0]["mtu"] = 1500
    data["runtime"]["max_num_batched_tokens"] = 2
    data["engram"]["host"] = "head"
    code, _, err = run(["inventory", "validate", str(write(tmp_path, data))], capsys)
    assert code == 2
    assert "3 problems" in err
    for field in ("hosts.head.fabric[0].mtu", "runtime.max_num_batched_tokens", "engram.host"):
        assert field in err


def test_misspelt_required_key_is_one_problem(tmp_path, capsys):
    data = base()
    data["runtime"]["max_num_seq"] = data["runtime"].pop("max_num_seqs")
    code, _, err = run(["inventory", "validate", str(write(tmp_path, data))], capsys)
    assert code == 2
    assert "1 problem" in err and "required key is missing" not in err


def test_custom_values_accept_what_the_image_supports(tmp_path, capsys):
    data = base()
    data["runtime"]["kv_cache_dtype"] = "fp6_experimental"
    code, _, err = run(["inventory", "validate", str(write(tmp_path, data))], capsys)
    assert code == 2 and "runtime.kv_cache_dtype" in err
    data["runtime"]["custom_values"] = ["kv_cache_dtype"]
    code, _, err = run(["inventory", "validate", str(write(tmp_path, data)), "--file-only"], capsys)
    assert code == 0, err


def test_memory_utilization_above_0_9_is_a_warning(tmp_path, capsys):
    data = base()
    data["runtime"]["gpu_memory_utilization"] = 0.95
    path = write(tmp_path, data)
    code, _, err = run(["inventory", "validate", str(path), "--file-only"], capsys)
    assert code == 0
    assert "warning:" in err and "runtime.gpu_memory_utilization" in err and str(path) in err
    code, out, _ = run(["inventory", "validate", str(path), "--json", "--file-only"], capsys)
    assert code == 0
    assert json.loads(out)["warnings"][0]["path"] == "runtime.gpu_memory_utilization"


def test_problem_lines_point_at_the_line_in_the_file(tmp_path, capsys):
    path = tmp_path / "lines.yaml"
    path.write_text(BASE.replace("    memory_gib: 503\n", "    memory_gib: 503\n    memroy_gib: 503\n"))
    line = BASE.splitlines().index("    memory_gib: 503") + 2  # 1-based, the line after
    code, _, err = run(["inventory", "validate", str(path)], capsys)
    assert code == 2
    assert f"{path}:{line}: hosts.offload.memroy_gib: unknown key 'memroy_gib'; did you mean 'memory_gib'?" in err


@pytest.mark.parametrize(
    "written, tokens",
    [(262144, 262144), ("262144", 262144), ("256K", 262144), ("262k", 262000), ("1M", 1048576), ("1.5m", 1500000)],
)
def test_max_model_len_reads_as_vllm_does(tmp_path, written, tokens):
    from sparkctl.inventory.loader import load_inventory

    data = base()
    data["runtime"]["max_model_len"] = written
    assert load_inventory(write(tmp_path, data)).runtime.max_model_len == tokens


def test_env_numbers_become_text_and_dashes_underscores(tmp_path):
    from sparkctl.inventory.loader import load_inventory

    data = base()
    data["runtime"]["env"] = {"VLLM_DSPARK_GPU_REJECTED_CONTEXT_MASK": 1, "SCALE": 0.5}
    data["runtime"]["moe_backend"] = "flashinfer-b12x"
    inv = load_inventory(write(tmp_path, data))
    assert inv.runtime.env == {"VLLM_DSPARK_GPU_REJECTED_CONTEXT_MASK": "1", "SCALE": "0.5"}
    assert inv.runtime.moe_backend == "flashinfer_b12x"
