"""The inventory: one YAML file describing a cluster, as immutable pydantic models.

Field names follow the runtime's own vocabulary (vLLM flags with dashes as underscores) so an
operator can map every key to the flag it becomes. Cross-field rules (exactly one head, fabric
peers that agree, ...) live in `validate.py`; this module holds the shapes.
"""

from __future__ import annotations

from ipaddress import IPv4Interface
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

Role = Literal["head", "worker", "offload"]
HostKeyPolicy = Literal["strict", "accept-new"]


class Model(BaseModel):
    """Base: unknown keys are errors (typos must not be silently ignored); models are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHDefaults(Model):
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key: Optional[Path] = Field(None, description="Private key on the control machine.")
    known_hosts: Optional[Path] = Field(
        None, description="known_hosts file to verify host keys against (default ~/.ssh/known_hosts)."
    )
    host_key_policy: HostKeyPolicy = Field(
        "strict",
        description="strict: the host key must already be known. accept-new: record an unknown host's key "
        "on first contact; a changed key is always refused.",
    )
    connect_timeout: float = Field(10.0, gt=0)


class SSH(Model):
    address: str = Field(..., description="Management address or name sparkctl connects to.")
    user: Optional[str] = None
    port: Optional[int] = Field(None, ge=1, le=65535)
    key: Optional[Path] = None
    known_hosts: Optional[Path] = None
    host_key_policy: Optional[HostKeyPolicy] = None


class GPU(Model):
    model: str = Field(..., description="Name as nvidia-smi prints it, e.g. 'NVIDIA GB10'.")
    count: int = Field(1, ge=1)


class FabricLink(Model):
    """One rail: a net device with an address that must reach the same rail on `peer`."""

    device: str = Field(..., description="Net device, e.g. enp1s0f0np0.")
    rdma: list[str] = Field(
        default_factory=list, description="RDMA device(s) behind it, e.g. [rocep1s0f0, roceP2p1s0f0]."
    )
    address: IPv4Interface = Field(..., description="Fabric address with prefix, e.g. 192.168.200.2/24.")
    mtu: int = Field(9000, ge=576, le=9216)
    speed_gbps: float = Field(..., gt=0, description="Expected link speed in Gb/s.")
    peer: str = Field(..., description="Name of the host at the other end of this link.")


class Host(Model):
    role: Role
    ssh: SSH
    gpu: Optional[GPU] = None
    memory_gib: Optional[float] = Field(None, gt=0)
    fabric: list[FabricLink] = Field(default_factory=list)


class Cluster(Model):
    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")


class Speculative(Model):
    method: str = Field(..., description="vLLM speculative method: ngram, draft_model, eagle, eagle3, mtp, dspark, ...")
    model: Optional[str] = None
    num_speculative_tokens: int = Field(..., ge=1, le=16)
    draft_tensor_parallel_size: Optional[int] = Field(None, ge=1)
    drafter_host: Optional[str] = Field(None, description="Host that runs the drafter (must have role offload).")
    drafter_port: int = Field(8100, ge=1, le=65535)
    drafter_image: Optional[str] = None


class Runtime(Model):
    image: str
    model: str = Field(..., description="Model path inside the container (and on each node).")
    served_model_name: str
    port: int = Field(8000, ge=1, le=65535)
    tensor_parallel_size: int = Field(2, ge=1)
    distributed_executor_backend: Literal["ray", "mp"] = "ray"
    kv_cache_dtype: str = "auto"
    block_size: int = Field(16, ge=1)
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    max_model_len: int = Field(..., ge=1)
    max_num_seqs: int = Field(..., ge=1)
    max_num_batched_tokens: int = Field(..., ge=1)
    kv_pool_tokens: Optional[int] = Field(
        None, ge=1, description="KV pool size the runtime reports (GPU KV cache size), when known."
    )
    moe_backend: Optional[str] = None
    speculative: Optional[Speculative] = None
    env: dict[str, str] = Field(default_factory=dict)
    shutdown_timeout: int = Field(60, ge=0, description="Seconds to drain in-flight requests on stop.")


class Caches(Model):
    host_path: str = Field(
        "/var/lib/sparkctl/cache", description="Persistent cache directory on each node, resolved on that node."
    )
    container_path: str = Field("/root/.cache/vllm", description="The runtime's cache root (VLLM_CACHE_ROOT).")


class Engram(Model):
    host: str = Field(..., description="Host whose RAM holds the tables (role offload).")
    source: str = Field(..., description="Where the tables are read from on that host.")
    size_gib: float = Field(..., gt=0)
    target: str = Field(..., description="RAM-backed mount point for the tables.")
    min_free_gib: float = Field(..., gt=0, description="Free RAM the host must have before placing them.")


class Inventory(Model):
    cluster: Cluster
    ssh_defaults: SSHDefaults = Field(default_factory=SSHDefaults)
    hosts: dict[str, Host]
    runtime: Runtime
    caches: Caches = Field(default_factory=Caches)
    engram: Optional[Engram] = None
    # Where the file came from (set by the loader; not part of the YAML): relative key and
    # known_hosts paths are resolved against its folder.
    _source: Optional[Path] = PrivateAttr(None)

    @property
    def source(self) -> Optional[Path]:
        return self._source

    def ssh_target(self, name: str) -> "SSHTarget":
        """The host's SSH settings with ssh_defaults filled in and paths resolved on this machine."""
        host = self.hosts[name]
        d = self.ssh_defaults
        base = self._source.parent if self._source else Path.cwd()

        def resolve(p: Optional[Path]) -> Optional[Path]:
            if p is None:
                return None
            p = p.expanduser()
            return p if p.is_absolute() else (base / p)

        return SSHTarget(
            name=name,
            address=host.ssh.address,
            user=host.ssh.user or d.user,
            port=host.ssh.port or d.port,
            key=resolve(host.ssh.key or d.key),
            known_hosts=resolve(host.ssh.known_hosts or d.known_hosts) or Path("~/.ssh/known_hosts").expanduser(),
            host_key_policy=host.ssh.host_key_policy or d.host_key_policy,
            connect_timeout=d.connect_timeout,
        )

    def hosts_with_role(self, role: Role) -> list[str]:
        return [n for n, h in self.hosts.items() if h.role == role]


class SSHTarget(Model):
    """Everything needed to open one SSH connection (derived, never written in YAML)."""

    name: str
    address: str
    user: str
    port: int
    key: Optional[Path]
    known_hosts: Path
    host_key_policy: HostKeyPolicy
    connect_timeout: float
