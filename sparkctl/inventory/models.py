"""The inventory: one YAML file describing a cluster, as immutable pydantic models.

Field names follow the runtime's own vocabulary (vLLM flags with dashes as underscores) so an
operator can map every key to the flag it becomes. Cross-field rules (exactly one head, fabric
peers that agree, ...) live in `validate.py`; this module holds the shapes.
"""

from __future__ import annotations

import typing
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from sparkctl.inventory.alerts import Alerts
from sparkctl.inventory.gateway import Gateway
from sparkctl.inventory.keeper import Keeper
from sparkctl.inventory.ssh_target import HostKeyPolicy, SSHTarget
from sparkctl.inventory.vllm import parse_token_count

Role = Literal["head", "worker", "offload"]

# Host names appear in messages, container names and file names: keep them plain.
HostName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# Token counts as vLLM accepts them on its command line: 262144, "256K" (x1024), "262k" (x1000).
TokenCount = Annotated[
    int,
    Field(ge=1),
    BeforeValidator(parse_token_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?[kmg]?\s*$|^\s*\d+[KMG]\s*$"},
            ]
        }
    ),
]


def _node_path(value: str) -> str:
    # Resolved on each node: a relative path or ~/$HOME would mean a different place on each
    # (shared/reference/vllm-interface.md: never expand $HOME on one node for another).
    if not value.startswith("/"):
        raise ValueError(f"'{value}' must be an absolute path (it is resolved on each node, not here)")
    if "~" in value or "$" in value:
        raise ValueError(f"'{value}': no ~ or $VARIABLES, home directories and environments differ between nodes")
    return value


NodePath = Annotated[str, AfterValidator(_node_path)]


def _image_ref(value: str) -> str:
    from sparkctl.inventory.image_ref import problem

    if why := problem(value):
        raise ValueError(why)
    return value


ImageRef = Annotated[str, AfterValidator(_image_ref)]


def _has_bool(annotation: object) -> bool:
    if annotation is bool:
        return True
    return any(_has_bool(a) for a in typing.get_args(annotation))


class Model(BaseModel):
    """Base: unknown keys are errors (typos must not be silently ignored); models are frozen."""

    # allow_inf_nan: YAML's .nan and .inf are floats that pass every bound (nan > 0 is never checked true)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yaml_booleans(cls, value: object, info: ValidationInfo) -> object:
        # pydantic reads true as 1 for numbers; YAML reads yes/no/on/off as booleans. Neither is
        # what an operator meant for a number or a name.
        if isinstance(value, bool) and info.field_name and not _has_bool(cls.model_fields[info.field_name].annotation):
            raise ValueError(
                f"got the boolean {str(value).lower()} (YAML reads true/false/yes/no/on/off as booleans); "
                "write the value itself, quoted if it is text"
            )
        return value


class SSHDefaults(Model):
    """SSH settings every host inherits unless its own `ssh` section overrides them."""

    # user, port, key, known_hosts and proxy_jump left unset come from the ssh_config file
    # (docs/inventory.md "SSH"); what the inventory says always wins.
    user: Optional[str] = Field(
        None, min_length=1, description="Login user on the hosts (default: ssh_config's User, else root)."
    )
    port: Optional[int] = Field(None, ge=1, le=65535, description="sshd port on the hosts (default: ssh_config's Port, else 22).")
    key: Optional[Path] = Field(None, description="Private key on the control machine (default: ssh_config's IdentityFile).")
    known_hosts: Optional[Path] = Field(
        None,
        description="known_hosts file to verify host keys against, on every jump hop too "
        "(default: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts).",
    )
    config_file: Optional[str] = Field(
        None,
        min_length=1,
        description="OpenSSH client config to read Host, HostName, User, Port, IdentityFile, ProxyJump and "
        "IdentityAgent from (default ~/.ssh/config, skipped if absent); 'none' to read none.",
    )
    proxy_jump: Optional[str] = Field(
        None,
        min_length=1,
        description="Jump host(s) to reach the hosts through, as ssh -J takes them: [user@]host[:port][,...] "
        "(default: ssh_config's ProxyJump); 'none' to connect directly whatever ssh_config says.",
    )
    agent: Optional[bool] = Field(
        None,
        description="Offer the ssh-agent's keys ($SSH_AUTH_SOCK, or ssh_config's IdentityAgent) after `key`. "
        "Default: yes unless ssh_config says IdentityAgent none; false: never.",
    )
    host_key_policy: HostKeyPolicy = Field(
        "strict",
        description="strict: the host key must already be known. accept-new: record an unknown host's key "
        "on first contact; a changed key is always refused.",
    )
    connect_timeout: float = Field(
        10.0,
        gt=0,
        description="Seconds to wait for an SSH connection, and for a connected host to answer a keepalive "
        "before it is reported as not answering (link down, sshd frozen).",
    )
    timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds a command (a probe) may run on a host before it is reported as hung; long "
        "operations (copies, image transfers, drains) set their own, longer deadlines.",
    )


class SSH(Model):
    """How sparkctl reaches the host; unset keys come from `ssh_defaults`."""

    address: str = Field(
        ...,
        min_length=1,
        description="Management address, or a name ssh_config's Host lines match (as in `ssh ADDRESS`): its "
        "HostName, if set, is the address connected to.",
    )
    user: Optional[str] = Field(None, min_length=1, description="Login user (default: ssh_defaults.user).")
    port: Optional[int] = Field(None, ge=1, le=65535, description="sshd port (default: ssh_defaults.port).")
    key: Optional[Path] = Field(None, description="Private key on the control machine (default: ssh_defaults.key).")
    known_hosts: Optional[Path] = Field(None, description="known_hosts file (default: ssh_defaults.known_hosts).")
    host_key_policy: Optional[HostKeyPolicy] = Field(None, description="strict or accept-new (default: ssh_defaults).")
    timeout: Optional[float] = Field(None, gt=0, description="Command deadline in seconds (default: ssh_defaults.timeout).")
    config_file: Optional[str] = Field(
        None, min_length=1, description="ssh_config file, or 'none' (default: ssh_defaults.config_file)."
    )
    proxy_jump: Optional[str] = Field(
        None, min_length=1, description="Jump host(s), or 'none' (default: ssh_defaults.proxy_jump)."
    )
    agent: Optional[bool] = Field(None, description="Offer the ssh-agent's keys (default: ssh_defaults.agent).")


class GPU(Model):
    model: str = Field(..., min_length=1, description="Name as nvidia-smi prints it, e.g. 'NVIDIA GB10'.")
    count: int = Field(1, ge=1, description="Number of such GPUs in the host (a DGX Spark has one GB10).")


class FabricLink(Model):
    """One rail: a net device with an address that must reach the same rail on `peer`."""

    device: str = Field(..., min_length=1, description="Net device, e.g. enp1s0f0np0.")
    rdma: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=list,
        description="RDMA device(s) NCCL uses over this link (NCCL_IB_HCA), e.g. both ConnectX-7 twins "
        "of the port: [rocep1s0f0, roceP2p1s0f0].",
    )
    address: IPv4Interface = Field(..., description="Fabric address with prefix, e.g. 192.168.200.2/24.")
    mtu: int = Field(9000, ge=576, le=9216, description="MTU both ends must have (9000 for jumbo frames).")
    speed_gbps: float = Field(..., gt=0, description="Expected link speed in Gb/s (200 for a Spark's QSFP port).")
    peer: str = Field(..., min_length=1, description="Name of the host at the other end of this link.")

    @field_validator("address", mode="before")
    @classmethod
    def _prefix_required(cls, value: object) -> object:
        # Without a prefix ipaddress reads /32, and the peer check would then say "not in the
        # same network" about a mistake that is really a missing /24.
        if isinstance(value, str) and "/" not in value:
            raise ValueError(f"'{value}' has no prefix length: write it with one, e.g. {value}/24")
        if isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not an address: write it as a.b.c.d/prefix, e.g. 192.168.200.2/24")
        return value


class Host(Model):
    role: Role = Field(
        ...,
        description="head: runs the Ray head and serves the API; worker: the other Spark(s); offload: an x86 "
        "host that runs the drafter and/or holds the Engram tables.",
    )
    ssh: SSH = Field(..., description="How sparkctl reaches this host.")
    gpu: Optional[GPU] = Field(None, description="The GPU(s) nvidia-smi must show on this host.")
    memory_gib: Optional[float] = Field(None, gt=0, description="Installed RAM in GiB (checks Engram placement).")
    fabric: list[FabricLink] = Field(default_factory=list, description="Fabric links (rails) of this host.")


class Cluster(Model):
    name: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]{0,62}$", description="Short name: lower-case letters, digits and dashes.")


class Speculative(Model):
    method: str = Field(
        ...,
        min_length=1,
        description="vLLM speculative method: ngram, draft_model, eagle, eagle3, mtp, dspark, ... (--speculative-config method).",
    )
    model: Optional[str] = Field(None, min_length=1, description="Drafter checkpoint (--speculative-config model).")
    num_speculative_tokens: int = Field(..., ge=1, le=16, description="Draft tokens proposed per step.")
    draft_tensor_parallel_size: Optional[int] = Field(None, ge=1, description="Tensor parallel size of the drafter.")
    drafter_host: Optional[str] = Field(None, description="Host that runs the drafter (must have role offload).")
    drafter_port: int = Field(8100, ge=1, le=65535, description="Port the drafter listens on, on drafter_host.")
    drafter_image: Optional[ImageRef] = Field(None, min_length=1, description="Image of the drafter (default: runtime.image).")


class Runtime(Model):
    """The inference runtime (vLLM) as started on head and worker; keys are vLLM's flag names."""

    image: ImageRef = Field(
        ...,
        min_length=1,
        description="Container image, the same on head and worker: a docker reference, [registry[:port]/]path[:tag][@digest].",
    )
    image_digest: Optional[str] = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Pins `image`: its manifest digest in the registry (as `docker pull image@sha256:...` takes "
        "it, `docker image inspect -f '{{.RepoDigests}}'` shows it). up pulls by this digest and every node must "
        "hold the image it names, whatever the tag points to now. Default: the tag, resolved once per run.",
    )
    model: str = Field(..., min_length=1, description="Model path inside the container (and on each node).")
    served_model_name: str = Field(..., min_length=1, description="Model id clients ask for (--served-model-name).")
    port: int = Field(8000, ge=1, le=65535, description="API port on the head (--port).")
    tensor_parallel_size: int = Field(2, ge=1, description="One rank per Spark (--tensor-parallel-size).")
    distributed_executor_backend: Literal["ray", "mp"] = Field(
        "ray",
        description="Multi-node executor (--distributed-executor-backend). ray: a Ray cluster (`ray start` on every "
        "node, `vllm serve` on the head), as vLLM's run_cluster.sh. mp: no Ray; vLLM's multiprocessing executor, "
        "`vllm serve ... --nnodes N --node-rank 0 --master-addr <head fabric ip> --master-port P` on the head and "
        "the same with `--node-rank R --headless` on each worker (docs/inventory.md says when to pick which).",
    )
    master_port: int = Field(
        29501,
        ge=1,
        le=65535,
        description="mp only (--master-port): the head's torch.distributed rendezvous port on its fabric address, "
        "which the headless workers connect to (vLLM's default 29501).",
    )
    kv_cache_dtype: str = Field(
        "auto", min_length=1, description="KV cache dtype (--kv-cache-dtype), e.g. fp8_ds_mla, nvfp4_ds_mla."
    )
    block_size: int = Field(16, ge=1, description="KV cache block size in tokens (--block-size).")
    gpu_memory_utilization: float = Field(
        0.92, gt=0, le=1, description="Share of GPU memory vLLM may use (--gpu-memory-utilization)."
    )
    max_model_len: TokenCount = Field(
        ...,
        description="Longest request (prompt + output) in tokens (--max-model-len); 262144, '256K' or '262k'. "
        "A per-request ceiling, not the KV pool.",
    )
    max_num_seqs: int = Field(..., ge=1, description="Concurrent requests at most (--max-num-seqs).")
    max_num_batched_tokens: TokenCount = Field(
        ..., description="Tokens scheduled per step at most (--max-num-batched-tokens); >= max_num_seqs."
    )
    kv_pool_tokens: Optional[TokenCount] = Field(
        None,
        description="KV pool size the runtime reports (GPU KV cache size), when known. The pool is shared by "
        "all live requests; max_model_len must fit in it.",
    )
    moe_backend: Optional[str] = Field(
        None, min_length=1, description="MoE kernels (--moe-backend), e.g. flashinfer_b12x; dashes read as underscores."
    )
    moe_quantization: Optional[Literal["nvfp4", "mxfp4"]] = Field(
        None,
        description="The checkpoint's MoE expert quantization, which picks vLLM's kernel path (not passed: vLLM reads "
        "it from the checkpoint): nvfp4 (ModelOpt NVFP4) or mxfp4 (DeepSeek-V4-Flash's own experts). vLLM logs "
        "the MoE backend by a path-specific name (e.g. flashinfer_b12x -> FLASHINFER_B12X on nvfp4); unset accepts "
        "the names of either path.",
    )
    checkpoint_swiglu_limit: Optional[float] = Field(
        None,
        description="The checkpoint's config.json `swiglu_limit` (DeepSeek V4 sets it; not passed: vLLM reads it). "
        "vLLM 0.33 then refuses a MoE backend that does not apply the SwiGLU clamp (flashinfer_b12x on nvfp4): "
        "doctor and `render` warn.",
    )
    speculative: Optional[Speculative] = Field(None, description="Speculative decoding (--speculative-config).")
    env: dict[EnvName, str] = Field(default_factory=dict, description="Extra environment for the runtime containers.")
    secret_env: list[EnvName] = Field(
        default_factory=list,
        description="Names in env whose values are secret: masked in every output and stored on the head only as "
        "a digest. Names containing KEY, TOKEN, SECRET, PASSWORD, PASS, CREDENTIAL or AUTH, passwords in URLs "
        "and token-shaped values are masked without being listed.",
    )
    shutdown_timeout: int = Field(60, ge=0, le=3600, description="Seconds to drain in-flight requests on stop (at most an hour).")
    memlock: int = Field(
        -1,
        ge=-1,
        description="Containers' locked-memory limit in bytes (--ulimit memlock); -1 = unlimited, what RDMA "
        "registration needs on real hosts. Lower it only where the engine may not raise limits (the lab).",
    )
    custom_values: list[Literal["kv_cache_dtype", "moe_backend", "speculative.method"]] = Field(
        default_factory=list,
        description="Keys whose value your image supports although upstream vLLM does not list it; sparkctl "
        "then skips its known-value check for them (and nothing else).",
    )

    @field_validator("moe_backend", mode="before")
    @classmethod
    def _underscores(cls, value: object) -> object:
        # vLLM normalises --moe-backend the same way.
        return value.replace("-", "_") if isinstance(value, str) else value

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: object) -> object:
        # `FLAG: 1` is how people write env in YAML; the container gets text either way.
        # Booleans, nulls, lists and mappings are left for pydantic to reject with the key named.
        if not isinstance(value, dict):
            return value
        return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()}

    @field_validator("secret_env")
    @classmethod
    def _secret_env_is_set(cls, value: list[str], info: ValidationInfo) -> list[str]:
        env = info.data.get("env") or {}
        missing = [n for n in value if n not in env]
        if missing:
            raise ValueError(f"{', '.join(missing)} not set in runtime.env; list only names runtime.env sets")
        return value


class Caches(Model):
    """Persistent kernel caches (torch.compile, Triton, FlashInfer JIT) so a restart skips compiling."""

    host_path: NodePath = Field(
        "/var/lib/sparkctl/cache", description="Persistent cache directory on each node, resolved on that node."
    )
    container_path: NodePath = Field("/root/.cache/vllm", description="The runtime's cache root (VLLM_CACHE_ROOT).")


class Engram(Model):
    """Engram tables held in the offload host's RAM."""

    host: str = Field(..., min_length=1, description="Host whose RAM holds the tables (role offload).")
    source: NodePath = Field(..., description="Where the tables are read from on that host.")
    size_gib: float = Field(..., gt=0, description="Size of the tables in GiB.")
    target: NodePath = Field(..., description="RAM-backed mount point for the tables.")
    min_free_gib: float = Field(..., gt=0, description="Free RAM the host must have before placing them.")


# A Hugging Face repo id: owner/name, as the hub spells it
RepoId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]
# A glob as huggingface_hub's allow/ignore patterns read it (fnmatch on the path in the repo)
FilePattern = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\s]+$")]
# A branch, tag or commit as the hub accepts one
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"


REVISION_HELP = (
    "A commit (40 hex digits) pins the files. A branch or tag is resolved to its commit once, when no node holds a "
    "verified copy of it, and the commit is what the nodes' records name."
)


class HubFiles(Model):
    """Which files of a hub repo travel (huggingface_hub's allow and ignore patterns)."""

    include: list[FilePattern] = Field(
        default_factory=list,
        description="Only the files matching one of these globs travel (hf download --include); empty: every file.",
    )
    exclude: list[FilePattern] = Field(
        default_factory=list,
        description="Files matching these globs never travel (hf download --exclude), e.g. 'original/*'.",
    )


class HubCheckpoint(HubFiles):
    """A checkpoint on a Hugging Face hub, pinned to one revision."""

    repo: RepoId = Field(..., description="The repo id on the hub, e.g. deepseek-ai/DeepSeek-V4-Flash.")
    revision: str = Field(..., pattern=REVISION_PATTERN, description=REVISION_HELP)


class Weights(HubFiles):
    """The model's weights: downloaded once from the hub (or copied from a folder already on the
    download host), copied to every other node over the fabric, verified byte for byte against the
    hub's manifest or the folder's SHA256SUMS (docs/weights.md). `runtime.model` is where every node
    holds them; the drafter's checkpoint (`speculative.model`) is placed on the drafter's host."""

    repo: Optional[RepoId] = Field(
        None, description="The repo id on the hub, e.g. deepseek-ai/DeepSeek-V4-Flash (or `directory`, not both)."
    )
    revision: Optional[str] = Field(None, pattern=REVISION_PATTERN, description="With `repo`: " + REVISION_HELP)
    directory: Optional[NodePath] = Field(
        None,
        description="Instead of `repo`: a folder on the download host that already holds the checkpoint, with a "
        "SHA256SUMS file (`sha256sum` output) naming every file to place; copied from there and verified against it "
        "(include and exclude apply to a repo only).",
    )

    endpoint: str = Field(
        "https://huggingface.co",
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="The hub's URL (HF_ENDPOINT): the public hub, a mirror, or a hub proxy your nodes reach.",
    )
    # (not `token_env`: a key with the word token has its value masked as a secret, and this holds a name)
    access_env: EnvName = Field(
        "HF_TOKEN",
        description="The environment variable holding a hub access token, for gated or private repos: read "
        "from sparkctl's own environment and handed to the download on the node; never written anywhere.",
    )
    download_host: Optional[str] = Field(
        None,
        description="The host that downloads from the hub, or holds `directory` (default: the head); the other nodes "
        "copy from it.",
    )
    drafter: Optional[HubCheckpoint] = Field(
        None,
        description="The drafter's checkpoint (speculative.model on speculative.drafter_host), downloaded there.",
    )

    @property
    def hub(self) -> Optional[HubCheckpoint]:
        """The hub checkpoint `repo` and `revision` name (None: the weights come from `directory`)."""
        if self.repo is None or self.revision is None:
            return None
        return HubCheckpoint(repo=self.repo, revision=self.revision, include=self.include, exclude=self.exclude)


class Inventory(Model):
    """One cluster: its hosts, fabric, runtime, caches and Engram placement."""

    cluster: Cluster = Field(..., description="Names the cluster.")
    ssh_defaults: SSHDefaults = Field(default_factory=SSHDefaults, description="SSH settings hosts inherit.")
    hosts: dict[HostName, Host] = Field(..., description="Hosts by name: exactly one head, one or more workers, offload hosts.")
    runtime: Runtime = Field(..., description="The inference runtime (vLLM) settings.")
    caches: Caches = Field(default_factory=Caches, description="Where each node keeps its persistent kernel caches.")
    engram: Optional[Engram] = Field(None, description="Engram tables placed in an offload host's RAM.")
    weights: Optional[Weights] = Field(
        None, description="Where the model's weights come from; without it, each node must already hold runtime.model."
    )
    alerts: Alerts = Field(default_factory=Alerts, description="Thresholds of `sparkctl alerts` (docs/alerts.md).")
    gateway: Gateway = Field(
        default_factory=Gateway, description="The front door on the head, holding requests across restarts (docs/gateway.md)."
    )
    keeper: Keeper = Field(
        default_factory=Keeper, description="The supervisor on the head that recovers crashes and reboots (docs/keeper.md)."
    )
    # Where the file came from (set by the loader; not part of the YAML): relative key and
    # known_hosts paths are resolved against its folder.
    _source: Optional[Path] = PrivateAttr(None)

    @property
    def source(self) -> Optional[Path]:
        return self._source

    def ssh_target(self, name: str) -> "SSHTarget":
        """The host's SSH settings: the host's `ssh`, then ssh_defaults, then ssh_config, then
        sparkctl's defaults; paths resolved on this machine (transport/sshconfig.py)."""
        from sparkctl.transport.sshconfig import resolve

        ssh = {**self.ssh_defaults.model_dump(), **self.hosts[name].ssh.model_dump(exclude_none=True)}
        base = self._source.parent if self._source else Path.cwd()
        for key in ("key", "known_hosts"):
            # relative to the inventory's folder; `base / path` keeps an absolute path as it is
            ssh[key] = base / ssh[key].expanduser() if ssh[key] else None
        if ssh["config_file"] and ssh["config_file"] != "none":
            ssh["config_file"] = str(base / Path(ssh["config_file"]).expanduser())
        return resolve(name, ssh)

    def hosts_with_role(self, role: Role) -> list[str]:
        return [n for n, h in self.hosts.items() if h.role == role]

    @property
    def engram_placement(self) -> Engram:
        """The `engram` section, for the step and checks that run only on an inventory that has one."""
        if self.engram is None:
            raise ValueError("this inventory has no `engram` section")
        return self.engram
