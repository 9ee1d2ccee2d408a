"""Moving an image between nodes the way registries do: only the layers the destination lacks.

`copy_image(src, dst, image_id, tag)`:
- looks up which of the image's layers the destination already holds (chain IDs of every image
  in its store) and has the source stream `docker save <id>` through `image_filter` (on the
  source node), which drops those layers: `docker load` skips layers it holds without reading
  them, so the bytes moved are the missing layers plus a few KiB of metadata. A destination on
  containerd's image store gets every layer: its import wants every blob the archive names
  (moby daemon/containerd/image_exporter.go), and only the classic store's skip is proven;
- straight over the fabric when the source node can SSH to the destination's fabric address
  (its own OpenSSH and known_hosts, AES-GCM: the cheapest cipher on AES-capable CPUs, both
  Grace and x86), else relayed through this machine over the two SSH connections sparkctl holds;
- saves by the source's image ID, so `docker load` leaves an untagged image: the tag is set only
  after the loaded image's identity (facts/docker.py: diff IDs + run config, the same under both
  image stores; load checks every layer's diff ID) equals the source's, so an interrupted transfer
  never leaves a tag on a partial image, and a tag that pointed at an older image keeps pointing
  at it until the new one is whole. The destination's own ID for it (the config digest on the
  classic store, the loaded manifest's digest on containerd's) is read from `docker load`'s output.

A short-lived registry on the head is not used: measured on the lab (benchmarks/sideload.py),
`docker push` gzips every layer (16 MB/s on 2 cores) and a pull is slower than a load; dockerd's
save/load is the limit either way, and the layer stream needs nothing installed on the nodes.
Progress (bytes, total, rate) goes to a callback. Layers move in one stream: `docker load`
registers them one after another, so parallel streams would only compete for the same CPUs.
"""

from __future__ import annotations

import hashlib
import json
import queue
import re
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from sparkctl.errors import HostError
from sparkctl.transport.image_identity import identity_of_inspect, images_root, short, store_of_inspect

FILTER_SOURCE = (Path(__file__).with_name("image_filter.py")).read_text()
CHUNK = 1 << 20
WINDOW = 8 << 20  # SSH channel window for the relay: 8 MiB measured best on the lab
PACKET = 32768
STALL_SECONDS = 120.0  # no byte moved for this long: the transfer is declared dead
# Fabric path: AES-GCM first (417 MB/s vs 257 for chacha20 on the lab's CPU), the rest for compatibility.
SSH_OPTIONS = [
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "ConnectTimeout=5",
    "-o",
    "Ciphers=aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr",
]


def chain_ids(diff_ids: list[str] | tuple[str, ...]) -> list[str]:
    """Layer chain IDs (what dockerd's layer store is keyed by), from the config's diff IDs."""
    out: list[str] = []
    for d in diff_ids:
        out.append(d if not out else "sha256:" + hashlib.sha256(f"{out[-1]} {d}".encode()).hexdigest())
    return out


@dataclass(frozen=True)
class StoredImage:
    """An image as one node's dockerd holds it."""

    id: str  # the store-local docker ID
    diff_ids: tuple[str, ...]
    size: int
    identity: str = ""  # image_identity.image_identity: equal for the same image under either store
    store: str = "classic"

    @property
    def chain_ids(self) -> list[str]:
        return chain_ids(self.diff_ids)

    @classmethod
    def from_inspect(cls, doc: dict) -> "StoredImage":
        return cls(
            doc["Id"],
            tuple((doc.get("RootFS") or {}).get("Layers") or ()),
            int(doc.get("Size") or 0),
            identity_of_inspect(doc),
            store_of_inspect(doc),
        )


LOADED_ID = re.compile(r"^Loaded image ID: (sha256:[0-9a-f]{64})\s*$", re.M)


def loaded_id(output: str) -> Optional[str]:
    """The image ID `docker load` reports for an untagged image (both stores print
    `Loaded image ID: sha256:...`: moby tarexport/load.go, daemon/containerd/image_exporter.go)."""
    found = LOADED_ID.findall(output)
    return found[-1] if found else None


def image_store(session) -> str:
    """ "containerd" when the host's dockerd keeps images in containerd's store (`docker info`
    DriverStatus names the snapshotter plugin type: moby daemon/containerd/service.go)."""
    return images_root(session.docker().api.info(), "", None)[0]


def stored_image(session, ref: str) -> Optional[StoredImage]:
    """The image `ref` (tag or ID) on the session's host, or None when it has none."""
    import docker

    try:
        return StoredImage.from_inspect(session.docker().api.inspect_image(ref))
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise HostError(f"{session.name}: docker could not inspect {ref}: {exc.explanation or exc}") from None


def held_chains(session) -> set[str]:
    """Chain IDs of every layer the host's layer store holds (through the images that use them)."""
    api = session.docker().api
    held: set[str] = set()
    for img in api.images(all=True):
        try:
            held.update(StoredImage.from_inspect(api.inspect_image(img["Id"])).chain_ids)
        except Exception:  # removed while we looked: it holds nothing any more
            continue
    return held


def layer_sizes(session, image_id: str, layers: int) -> Optional[list[int]]:
    """Per layer (bottom first) uncompressed size, from the image history; None when the history
    does not map onto the layers (empty-layer entries cannot be told from empty layers)."""
    try:
        history = session.docker().api.history(image_id)
    except Exception:
        return None
    sizes = [int(h.get("Size") or 0) for h in reversed(history)]
    real = [s for s in sizes if s > 0]
    return real if len(real) == layers else None


@dataclass
class Progress:
    sent: int
    total: Optional[int]
    seconds: float

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.sent / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        tot = f"/{self.total / 1e6:.0f}" if self.total else ""
        return f"{self.sent / 1e6:.0f}{tot} MB at {self.rate / 1e6:.0f} MB/s"


@dataclass
class Transfer:
    """What one copy did."""

    path: str  # "fabric", "relay" or "none" (the destination already held the image)
    why: str = ""  # why not over the fabric, when a fabric address was given
    bytes_sent: int = 0
    layers_sent: int = 0
    layers_skipped: int = 0
    seconds: float = 0.0  # all of it, from the first look at the destination to the tag
    stream_seconds: float = 0.0  # the save | load stream alone

    @property
    def rate(self) -> float:
        return self.bytes_sent / self.seconds if self.seconds > 0 else 0.0


def save_command(image_id: str, held: list[tuple[str, str]]) -> str:
    """Run on the source: `docker save` of the image, minus the (chain ID, diff ID) layers held."""
    want = json.dumps({"chains": [c for c, _ in held], "diffs": [d for _, d in held]})
    save = f"docker save {shlex.quote(image_id)}"
    # a node without python3 sends every layer (docker load still skips those it holds: correct, slower)
    return (
        f"if command -v python3 >/dev/null 2>&1; then {save} | python3 -c {shlex.quote(FILTER_SOURCE)} "
        f"{shlex.quote(want)}; else echo 'sparkctl-filter unavailable: no python3 on this node' >&2; {save}; fi"
    )


def ssh_to(address: str) -> str:
    return shlex.join(["ssh", *SSH_OPTIONS, address])


def cannot_ssh(src, address: str) -> str:
    """Why the source node cannot SSH to `address` by itself (keys and known_hosts of its own);
    "" when it can."""
    r = src.run(["sh", "-c", f"{ssh_to(address)} true"], timeout=30)
    return "" if r.ok else (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1][:160]


def _filter_line(line: str, on_progress: Callable[[int], None], stats: dict, errors: list[str]) -> None:
    if line.startswith("sparkctl-filter progress "):
        on_progress(int(line.split()[-1]))
    elif line.startswith("sparkctl-filter done "):
        stats.update(json.loads(line.split(" ", 2)[2]))
    elif line.startswith("sparkctl-filter unavailable"):
        stats["unfiltered"] = line.split(": ", 1)[-1].strip()
    elif line.strip():
        errors.append(line.strip())


def _open(session, command: str):
    chan = session.paramiko_client.get_transport().open_session(window_size=WINDOW, max_packet_size=PACKET)
    chan.settimeout(STALL_SECONDS)
    chan.exec_command(command)
    return chan


def _fabric(src, address: str, command: str, on_progress, stats: dict) -> str:
    """The source node pipes the filtered save into `docker load` on the destination over SSH.

    A watchdog reads the channel's stdin, which only ends when this machine closes the channel
    (an interrupt, a crash, a lost connection): it then kills the whole pipeline at once, so the
    node-to-node stream stops with it instead of running on into the destination's dockerd."""
    watchdog = "exec 3<&0; { cat <&3 >/dev/null 2>&1; kill -TERM 0; } >/dev/null 2>&1 &"
    full = f"set -o pipefail; {watchdog} {command} | {ssh_to(address)} docker load"
    chan = _open(src, f"bash -c {shlex.quote(full)}")
    errors: list[str] = []
    try:
        for raw in chan.makefile_stderr("rb"):
            _filter_line(raw.decode(errors="replace"), on_progress, stats, errors)
        rc = chan.recv_exit_status()
        out = chan.makefile("rb").read().decode(errors="replace")
    except TimeoutError:
        raise HostError(f"{src.name}: image transfer stalled (no progress for {STALL_SECONDS:.0f} s)") from None
    finally:
        chan.close()  # ends the watchdog's stdin: on an interrupt it kills the pipeline
    if rc:
        raise HostError(
            f"{src.name}: docker save | ssh {address} docker load failed (exit {rc}): "
            f"{' '.join(errors)[-400:] or out.strip()[-400:]}"
        )
    return out


def _relay(src, dst, command: str, on_progress, stats: dict) -> str:
    """The filtered save from the source relayed to `docker load` on the destination by this
    machine: a reader thread feeds a bounded queue so receiving and sending overlap."""
    out_chan = _open(src, f"bash -c {shlex.quote('set -o pipefail; ' + command)}")
    in_chan = _open(dst, "docker load")
    chunks: "queue.Queue[bytes | BaseException | None]" = queue.Queue(maxsize=64)

    def reader() -> None:
        try:
            while data := out_chan.recv(CHUNK):
                chunks.put(data)
        except BaseException as exc:  # noqa: BLE001 - handed to the sending thread
            chunks.put(exc)
        finally:
            chunks.put(None)

    t = threading.Thread(target=reader, name="sparkctl-image-relay", daemon=True)
    t.start()
    sent = 0
    try:
        while (data := chunks.get(timeout=STALL_SECONDS)) is not None:
            if isinstance(data, BaseException):
                raise data
            in_chan.sendall(data)
            sent += len(data)
            on_progress(sent)
        in_chan.shutdown_write()
        save_rc, load_rc = out_chan.recv_exit_status(), in_chan.recv_exit_status()
        loaded = in_chan.makefile("rb").read().decode(errors="replace")
    except (TimeoutError, queue.Empty):
        raise HostError(f"relay {src.name} -> {dst.name} stalled (no progress for {STALL_SECONDS:.0f} s)") from None
    finally:
        for c in (out_chan, in_chan):
            c.close()  # an interrupt closes both: save gets SIGPIPE, load sees a short tar and keeps nothing
    errors: list[str] = []
    for line in out_chan.makefile_stderr("rb").read().decode(errors="replace").splitlines():
        _filter_line(line, lambda n: None, stats, errors)
    load_err = in_chan.makefile_stderr("rb").read().decode(errors="replace").strip()
    if save_rc or load_rc:
        raise HostError(
            f"relay {src.name} -> {dst.name} failed (save exit {save_rc}, load exit {load_rc}): "
            f"{(' '.join(errors) + ' ' + load_err).strip()[-400:]}"
        )
    return loaded


def tag_image(session, image_id: str, tag: str) -> None:
    repo, _, name = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
    if not session.docker().api.tag(image_id, repo, name, force=True):
        raise HostError(f"{session.name}: docker tag {short(image_id)} {tag} failed")


def copy_image(
    src,
    dst,
    image_id: str,
    tag: Optional[str] = None,
    *,
    fabric_address: Optional[str] = None,
    progress: Optional[Callable[[Progress], None]] = None,
) -> Transfer:
    """Give `dst` the image `image_id` (the source's own docker ID) held by `src` (both
    HostSessions), then tag it `tag`.

    Only the layers `dst` lacks move (all of them to a containerd-store destination). With
    `fabric_address` (dst's address on a rail the source reaches) the source sends straight there
    when it can SSH to it, else the copy is relayed. Raises HostError when the source lacks the
    image or the result is not that image (by identity: the two stores' IDs differ)."""
    have = stored_image(src, image_id)
    if have is None or have.id != image_id:
        raise HostError(f"{src.name}: does not hold image {short(image_id)} to copy from")
    t0 = time.monotonic()
    there = stored_image(dst, image_id)  # same store, still held untagged: only the tag is missing
    if there is not None and there.identity == have.identity:
        if tag:
            tag_image(dst, there.id, tag)
        return Transfer("none")
    held_set = held_chains(dst) if image_store(dst) == "classic" else set()
    held = [(c, d) for c, d in zip(have.chain_ids, have.diff_ids) if c in held_set]
    sizes = layer_sizes(src, image_id, len(have.diff_ids))
    total = sum(s for (c, s) in zip(have.chain_ids, sizes) if c not in held_set) if sizes else have.size

    def on_progress(sent: int) -> None:
        if progress is not None:
            progress(Progress(sent, total, time.monotonic() - t0))

    path, why = "relay", ""
    if fabric_address:
        reason = cannot_ssh(src, fabric_address)
        path, why = ("relay", f"{src.name} cannot SSH to {fabric_address}: {reason}") if reason else ("fabric", "")
    stats: dict = {}
    command = save_command(image_id, held)
    t_stream = time.monotonic()
    if path == "fabric" and fabric_address:
        output = _fabric(src, fabric_address, command, on_progress, stats)
    else:
        output = _relay(src, dst, command, on_progress, stats)
    stream_seconds = time.monotonic() - t_stream
    # the destination's ID for it: what load printed; the source's ID when the stores agree on IDs
    now = stored_image(dst, loaded_id(output) or image_id)
    if now is None or now.identity != have.identity:
        raise HostError(
            f"{dst.name}: after the copy from {src.name} the image is {short(now.identity if now else None)}, "
            f"not {short(have.identity)}",
            fix=f"check the disk space and `journalctl -u docker` on {dst.name}, then run the copy again",
        )
    if tag:
        tag_image(dst, now.id, tag)
    return Transfer(
        path,
        why,
        bytes_sent=int(stats.get("bytes_out", 0)),
        layers_sent=int(stats.get("layers_sent", 0)),
        layers_skipped=int(stats.get("layers_skipped", 0)),
        seconds=time.monotonic() - t0,
        stream_seconds=stream_seconds,
    )
