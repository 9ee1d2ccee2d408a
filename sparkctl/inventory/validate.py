"""Cross-field rules: what an operator gets wrong that no single key shows, caught before any host is touched.

Each rule returns `Problem`s naming the field path to fix. Errors stop every command (exit 2);
warnings are printed by `inventory validate` and do not.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Iterator

from sparkctl.inventory.models import Inventory
from sparkctl.inventory.problems import Problem, did_you_mean
from sparkctl.inventory.vllm import KNOWN_VALUES, METHODS_NEEDING_MODEL

SPARK_ROLES = ("head", "worker")

# Set per node by sparkctl from that node's own fabric address; one value in runtime.env would
# give both nodes the same identity (shared/reference/spark-fabric.md).
PER_NODE_ENV = ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS")


def check_inventory(inv: Inventory) -> list[Problem]:
    """Every cross-field problem (errors and warnings), in file order as far as possible."""
    rules = (_roles, _tensor_parallel, _executor, _fabric, _addresses, _runtime, _speculative, _engram, _weights, _gateway)
    return [p for rule in rules for p in rule(inv)]


def _host_ref(inv: Inventory, name: str) -> str:
    """' (did you mean 'worker'?)' for a misspelled host name."""
    guess = did_you_mean(name, inv.hosts)
    return f"; did you mean '{guess}'?" if guess else f"; hosts are: {', '.join(inv.hosts)}"


# --- roles and tensor parallel ---------------------------------------------------------------


def _roles(inv: Inventory) -> Iterator[Problem]:
    heads = inv.hosts_with_role("head")
    if not heads:
        yield Problem(("hosts",), "no host has role head; exactly one is needed (it runs the Ray head and serves the API)")
    for extra in heads[1:]:
        yield Problem(
            ("hosts", extra, "role"),
            f"a second head ('{heads[0]}' is already the head); exactly one host has role head, the other Sparks are workers",
        )
    if not inv.hosts_with_role("worker"):
        yield Problem(
            ("hosts",), "no host has role worker; the model is split across the Sparks, so at least one worker is needed"
        )


def _tensor_parallel(inv: Inventory) -> Iterator[Problem]:
    sparks = [n for n, h in inv.hosts.items() if h.role in SPARK_ROLES]
    tp = inv.runtime.tensor_parallel_size
    if sparks and tp != len(sparks):
        yield Problem(
            ("runtime", "tensor_parallel_size"),
            f"is {tp} but the inventory has {len(sparks)} Sparks (head + workers: {', '.join(sparks)}); "
            f"with one GB10 each, tensor parallel size must equal the number of Sparks ({len(sparks)})",
        )


def _executor(inv: Inventory) -> Iterator[Problem]:
    """What vLLM 0.33 refuses of the mp executor's multi-node launch, before any host is touched."""
    rt = inv.runtime
    if rt.distributed_executor_backend != "mp":
        return
    sparks = [n for n, h in inv.hosts.items() if h.role in SPARK_ROLES]
    nnodes = len(sparks)  # one `vllm serve` per Spark: --nnodes
    world = rt.tensor_parallel_size  # x pipeline parallel (1) x prefill context parallel (1)
    if nnodes > 1 and world % nnodes:
        # engine/arg_utils.py create_engine_config
        yield Problem(
            ("runtime", "distributed_executor_backend"),
            f"mp runs `--nnodes {nnodes}` (one per Spark) and vLLM 0.33 refuses it: `--nnodes {nnodes}` must evenly "
            f"divide the total world size ({world}); set runtime.tensor_parallel_size to a multiple of {nnodes}",
        )
    for name in sparks:
        gpu = inv.hosts[name].gpu
        if gpu and world // nnodes > gpu.count:
            yield Problem(
                ("hosts", name, "gpu", "count"),
                f"is {gpu.count} but mp puts {world // nnodes} rank(s) on every node "
                f"(world size {world} / {nnodes} nodes); each needs its own GPU",
            )
    if rt.master_port == rt.port:
        yield Problem(
            ("runtime", "master_port"),
            f"is the API port ({rt.port}) too; the head binds both (the rendezvous "
            "on its fabric address, the API on 0.0.0.0): pick another, e.g. 29501",
        )


# --- fabric ----------------------------------------------------------------------------------


def _fabric(inv: Inventory) -> Iterator[Problem]:
    paired: set[tuple[str, int]] = set()  # ends already reported as one pair
    for name, host in inv.hosts.items():
        devices: dict[str, int] = {}
        rdmas: dict[str, int] = {}
        for i, link in enumerate(host.fabric):
            here = ("hosts", name, "fabric", i)
            if link.device in devices:
                yield Problem(
                    here + ("device",),
                    f"{link.device} is already used by fabric[{devices[link.device]}] of this host; one entry per net device",
                )
            devices.setdefault(link.device, i)
            for dev in link.rdma:
                if dev in rdmas and rdmas[dev] != i:
                    yield Problem(here + ("rdma",), f"RDMA device {dev} is already listed on fabric[{rdmas[dev]}] of this host")
                rdmas.setdefault(dev, i)
            net = link.address.network
            if net.prefixlen <= 30 and link.address.ip in (net.network_address, net.broadcast_address):
                kind = "network" if link.address.ip == net.network_address else "broadcast"
                yield Problem(here + ("address",), f"{link.address} is the {kind} address of {net}; use a host address inside it")

            if link.peer == name:
                yield Problem(
                    here + ("peer",), f"is this host itself ('{name}'); a link's peer is the host at the other end of the cable"
                )
                continue
            if link.peer not in inv.hosts:
                yield Problem(here + ("peer",), f"'{link.peer}' is not a host in this inventory{_host_ref(inv, link.peer)}")
                continue
            if (name, i) in paired:
                continue  # the other end of a link already checked
            peer_links = list(enumerate(inv.hosts[link.peer].fabric))
            same_net = [(j, o) for j, o in peer_links if o.peer == name and o.address.network == net]
            if not same_net:
                there = [(j, o) for j, o in peer_links if o.address.network == net]
                if there:
                    j, o = there[0]
                    paired.add((link.peer, j))
                    if o.peer in inv.hosts and o.peer != link.peer:
                        yield Problem(
                            here + ("peer",),
                            f"is '{link.peer}', but hosts.{link.peer}.fabric[{j}] in the same subnet ({net}) names "
                            f"peer '{o.peer}', not '{name}'; the two ends must name each other",
                        )
                    continue  # otherwise its bad peer is reported on that link
                back = [(j, o) for j, o in peer_links if o.peer == name]
                if not back:
                    yield Problem(
                        here + ("peer",),
                        f"'{link.peer}' has no fabric link with peer: {name}; each link is written on both hosts, "
                        f"so add one to hosts.{link.peer}.fabric",
                    )
                    continue
                theirs = ", ".join(str(o.address) for _, o in back)
                paired.update((link.peer, j) for j, _ in back)
                yield Problem(
                    here + ("address",),
                    f"{link.address} is in {net}, but {link.peer}'s link(s) back to {name} are {theirs}; "
                    "both ends of a link must be in the same subnet (same network and prefix)",
                )
                continue
            j, other = same_net[0]
            paired.add((link.peer, j))
            other_end = f"hosts.{link.peer}.fabric[{j}]"
            if other.address.ip == link.address.ip:
                yield Problem(
                    here + ("address",),
                    f"{link.address.ip} is also the address of the other end ({other_end}); the two ends need different addresses",
                )
            if other.mtu != link.mtu:
                yield Problem(
                    here + ("mtu",),
                    f"is {link.mtu} but the other end ({other_end}.mtu) is {other.mtu}; both ends must match "
                    "or large frames are dropped (jumbo frames need 9000 on both)",
                )
            if other.speed_gbps != link.speed_gbps:
                yield Problem(
                    here + ("speed_gbps",),
                    f"is {link.speed_gbps:g} but the other end ({other_end}.speed_gbps) is {other.speed_gbps:g}; a cable links at one speed",
                )

    # Tensor parallel traffic between Sparks goes over the ConnectX-7 fabric.
    heads = inv.hosts_with_role("head")
    if len(heads) == 1:
        head = heads[0]
        if any(link.peer not in inv.hosts or link.peer == head for link in inv.hosts[head].fabric):
            return  # a link with a bad peer is reported above; it may well be the missing one
        for worker in inv.hosts_with_role("worker"):
            if not any(link.peer == worker for link in inv.hosts[head].fabric):
                yield Problem(
                    ("hosts", head, "fabric"),
                    f"has no link to worker '{worker}'; tensor parallel traffic between the Sparks needs a fabric link (ConnectX-7)",
                )


def _addresses(inv: Inventory) -> Iterator[Problem]:
    """No address may be claimed twice: SSH addresses between hosts, fabric addresses anywhere."""
    ssh_owner: dict[str, str] = {}
    for name, host in inv.hosts.items():
        addr = _normal(host.ssh.address)
        if addr in ssh_owner:
            yield Problem(("hosts", name, "ssh", "address"), f"{host.ssh.address} is also the SSH address of '{ssh_owner[addr]}'")
        else:
            ssh_owner[addr] = name
    fabric_owner: dict[str, tuple[str, int]] = {}
    for name, host in inv.hosts.items():
        for i, link in enumerate(host.fabric):
            ip = str(link.address.ip)
            here = ("hosts", name, "fabric", i, "address")
            if ip in fabric_owner:
                other, j = fabric_owner[ip]
                if inv.hosts[other].fabric[j].peer == name and link.peer == other:
                    continue  # the two ends of one link: reported by _fabric
                yield Problem(here, f"{ip} is already the address of hosts.{other}.fabric[{j}]")
            else:
                fabric_owner[ip] = (name, i)
            owner = ssh_owner.get(ip)
            if owner is not None and owner != name:
                yield Problem(here, f"{ip} is the SSH address of '{owner}'")


def _normal(address: str) -> str:
    try:
        return str(IPv4Address(address))
    except ValueError:
        return address.strip().lower().rstrip(".")


# --- runtime ---------------------------------------------------------------------------------


def _known_value(inv: Inventory, key: str, value: str | None, path: tuple) -> Iterator[Problem]:
    if value is None or key in inv.runtime.custom_values:
        return
    known = KNOWN_VALUES[key]
    if value in known:
        return
    guess = did_you_mean(value, sorted(known))
    hint = f"did you mean '{guess}'? " if guess else ""
    yield Problem(
        path,
        f"'{value}' is not a value vLLM knows; {hint}known: {', '.join(sorted(known))}. A wrong value here may "
        f"not fail at launch but silently pick a slower kernel. If your image really supports it, add "
        f"{key} to runtime.custom_values",
    )


def _runtime(inv: Inventory) -> Iterator[Problem]:
    rt = inv.runtime
    yield from _known_value(inv, "kv_cache_dtype", rt.kv_cache_dtype, ("runtime", "kv_cache_dtype"))
    yield from _known_value(inv, "moe_backend", rt.moe_backend, ("runtime", "moe_backend"))
    if rt.max_num_batched_tokens < rt.max_num_seqs:
        yield Problem(
            ("runtime", "max_num_batched_tokens"),
            f"{rt.max_num_batched_tokens} is below max_num_seqs ({rt.max_num_seqs}); every running request needs at "
            "least one token per step, and vLLM refuses to start",
        )
    if rt.kv_pool_tokens is not None and rt.max_model_len > rt.kv_pool_tokens:
        yield Problem(
            ("runtime", "max_model_len"),
            f"{rt.max_model_len} is longer than the KV pool ({rt.kv_pool_tokens} tokens). The shared KV pool is not a "
            "context window: a request is capped by max_model_len, and the sum of live tokens over all requests "
            "must fit in the pool, so one request can never be longer than the pool itself",
        )
    for key in PER_NODE_ENV:
        if key in rt.env:
            yield Problem(
                ("runtime", "env", key),
                "is set per node by sparkctl from that node's fabric address; one value here would give every "
                "node the same identity: remove it",
            )
    if rt.gpu_memory_utilization > 0.9:
        yield Problem(
            ("runtime", "gpu_memory_utilization"),
            f"{rt.gpu_memory_utilization:g} leaves little of a GB10's unified memory to the OS; head resets and "
            "NV_ERR_NO_MEMORY during long prefill are reported above 0.9 (the DSpark recipe runs 0.85)",
            severity="warning",
        )


def _speculative(inv: Inventory) -> Iterator[Problem]:
    spec = inv.runtime.speculative
    if spec is None:
        return
    base = ("runtime", "speculative")
    yield from _known_value(inv, "speculative.method", spec.method, base + ("method",))
    if spec.method in METHODS_NEEDING_MODEL and not spec.model:
        yield Problem(base + ("model",), f"method {spec.method} runs a separate drafter checkpoint: name it in speculative.model")
    if spec.drafter_host is None:
        return
    name = spec.drafter_host
    if name not in inv.hosts:
        yield Problem(base + ("drafter_host",), f"'{name}' is not a host in this inventory{_host_ref(inv, name)}")
        return
    host = inv.hosts[name]
    if host.role != "offload":
        yield Problem(
            base + ("drafter_host",),
            f"'{name}' has role {host.role}; the drafter runs on a host with role offload, so the Sparks keep their "
            "memory for the KV cache",
        )
    if host.gpu is None:
        yield Problem(base + ("drafter_host",), f"'{name}' has no gpu declared (hosts.{name}.gpu); the drafter runs on GPUs")
    elif spec.draft_tensor_parallel_size and spec.draft_tensor_parallel_size > host.gpu.count:
        yield Problem(
            base + ("draft_tensor_parallel_size",),
            f"is {spec.draft_tensor_parallel_size} but '{name}' has {host.gpu.count} GPU(s) (hosts.{name}.gpu.count)",
        )


def _engram(inv: Inventory) -> Iterator[Problem]:
    eg = inv.engram
    if eg is None:
        return
    if eg.host not in inv.hosts:
        yield Problem(("engram", "host"), f"'{eg.host}' is not a host in this inventory{_host_ref(inv, eg.host)}")
    else:
        host = inv.hosts[eg.host]
        if host.role != "offload":
            yield Problem(
                ("engram", "host"),
                f"'{eg.host}' has role {host.role}; the Engram tables go into the RAM of a host with role offload, "
                "so the Sparks keep their memory for the KV cache",
            )
        if host.memory_gib is not None and eg.min_free_gib > host.memory_gib:
            yield Problem(
                ("engram", "min_free_gib"),
                f"{eg.min_free_gib:g} GiB is more than '{eg.host}' has in all (hosts.{eg.host}.memory_gib: {host.memory_gib:g})",
            )
    if eg.min_free_gib < eg.size_gib:
        yield Problem(
            ("engram", "min_free_gib"),
            f"{eg.min_free_gib:g} GiB is less than the tables need (size_gib: {eg.size_gib:g}); the host must have at "
            "least that much free before they are placed",
        )


# --- weights -----------------------------------------------------------------------------------


def _weights(inv: Inventory) -> Iterator[Problem]:
    w = inv.weights
    if w is None:
        return
    if w.repo is not None and w.directory is not None:
        yield Problem(
            ("weights", "directory"), "set either repo (a hub checkpoint) or directory (a folder on the download host), not both"
        )
    elif w.repo is None and w.directory is None:
        yield Problem(
            ("weights", "repo"),
            "says where the weights come from: set repo (with revision) for a hub "
            "checkpoint, or directory for a folder already on the download host",
        )
    elif w.repo is not None and w.revision is None:
        yield Problem(
            ("weights", "revision"),
            f"is needed with repo: a commit of {w.repo} (40 hex digits) pins the "
            "files; a branch or tag (main) is resolved to its commit once",
        )
    elif w.directory is not None:
        for key in ("revision", "include", "exclude"):
            if getattr(w, key):
                yield Problem(
                    ("weights", key), "applies to a hub repo; with directory, its SHA256SUMS names the files to place: remove it"
                )
    if w.download_host is not None:
        if w.download_host not in inv.hosts:
            why = f"'{w.download_host}' is not a host in this inventory{_host_ref(inv, w.download_host)}"
            yield Problem(("weights", "download_host"), why)
        elif inv.hosts[w.download_host].role not in SPARK_ROLES:
            yield Problem(
                ("weights", "download_host"),
                f"'{w.download_host}' has role {inv.hosts[w.download_host].role}; the model is downloaded on a node that "
                "runs the engine (head or worker), which then copies it to the others over the fabric",
            )
    folders: list[tuple[tuple[str, ...], str]] = [(("runtime", "model"), inv.runtime.model)]
    spec = inv.runtime.speculative
    if w.drafter is not None and spec is not None and spec.model:
        folders.append((("runtime", "speculative", "model"), spec.model))
    for where, path in folders:
        if not path.startswith("/") or path.rstrip("/").count("/") < 2:
            yield Problem(
                where,
                f"{path!r}: with `weights` set this is the folder sparkctl places the checkpoint in on each node: "
                "an absolute path at least two levels deep, e.g. /models/DeepSeek-V4-Flash",
            )
    if w.drafter is not None:
        if spec is None or not spec.model or not spec.drafter_host:
            yield Problem(
                ("weights", "drafter"),
                "places the drafter's checkpoint on the drafter's host: set runtime.speculative.model (its path) and "
                "runtime.speculative.drafter_host, or remove weights.drafter",
            )


# --- the gateway -------------------------------------------------------------------------------


def _gateway(inv: Inventory) -> Iterator[Problem]:
    """The engine's port behind the gateway must be free of every other port sparkctl opens on the head."""
    from sparkctl.launch.names import RAY_PORT

    gw, rt = inv.gateway, inv.runtime
    if not gw.enabled:
        return
    taken = {rt.port: "runtime.port (the gateway listens there)", RAY_PORT: "Ray's GCS port"}
    if rt.distributed_executor_backend == "mp":
        taken[rt.master_port] = "runtime.master_port"
    spec = rt.speculative
    heads = inv.hosts_with_role("head")
    if spec and spec.drafter_host and heads and spec.drafter_host == heads[0]:
        taken[spec.drafter_port] = "runtime.speculative.drafter_port"
    if gw.engine_port in taken:
        yield Problem(
            ("gateway", "engine_port"),
            f"{gw.engine_port} is already {taken[gw.engine_port]} on the head; pick a free port for the engine behind "
            "the gateway (e.g. runtime.port + 1)",
        )
    if gw.max_buffered_bytes < gw.max_body_bytes:
        yield Problem(
            ("gateway", "max_buffered_bytes"),
            f"{gw.max_buffered_bytes} is below max_body_bytes ({gw.max_body_bytes}): one largest body must fit",
        )
    if gw.memory_limit_bytes < gw.max_buffered_bytes + (256 << 20):
        yield Problem(
            ("gateway", "memory_limit_bytes"),
            f"{gw.memory_limit_bytes} leaves under 256 MiB beside max_buffered_bytes ({gw.max_buffered_bytes}) for the "
            "gateway itself; raise it or lower max_buffered_bytes",
        )
    if gw.open_files is not None and gw.open_files < 2 * gw.hold_queue + 256:
        yield Problem(
            ("gateway", "open_files"),
            f"{gw.open_files} is below 2 x hold_queue ({gw.hold_queue}) + 256: releasing a full hold (a client and an "
            "engine connection each) would run out of files",
        )
    if gw.hold_max_s < gw.hold_s:
        yield Problem(
            ("gateway", "hold_max_s"),
            f"{gw.hold_max_s:g} is below hold_s ({gw.hold_s:g}); a hold must last at least as long as a request may wait",
        )
