"""Weights step: the checkpoint on every node that needs it, one download, verified byte for byte.

For each checkpoint (the model at `runtime.model` on every engine node; the drafter's at
`speculative.model` on its host; placement.py):
1. the manifest: from the record of a node whose copy was verified for the inventory's repo,
   revision and patterns (no hub contact), else from the hub (weights/hub.py);
2. per node, the files whose size or digest do not match it (facts/weights.py re-hashes only the
   files whose size or ctime moved since they were verified);
3. the download host fetches its missing files with the hub's own client (`hf download`, run from
   the engine's image: vLLM's images ship it, so the node needs nothing installed), resumable, into
   a staging folder beside the path (or, for a folder source, copies them from that folder, which
   its SHA256SUMS lists: weights/manifest.py); every other node gets them from the download host with rsync
   over a fabric rail (never the management network), resumable (--partial --append-verify), also
   into staging; the download host goes first (the playbook applies host after host);
4. every fetched file's digest is checked against the manifest before it is moved into place (a
   rename on the same filesystem: the path never holds a partial file; a node with no copy gets
   the whole folder renamed), then the record and the stat record are written, and the copied
   files are dropped from the page cache (on the Sparks' unified memory a full page cache is what
   crashed model loads in the field).
A node that lacks the space for what it still needs is refused before a byte moves.

Another version at the path (a change of repo, revision or patterns) is not replaced file by file:
the new one is completed in staging with hard links of the files both share, then the old one moves
aside whole (facts/weights.py previous_path) and staging takes its place; going back links and
renames it back, fetching nothing. While a transfer runs, the receiving node's bytes, rate and time
left are reported (steps/transfer.py); a copy's expected time in the plan comes from the rail's rate
measured in the run (the fabric step's probe, or in --check the same probe run for the copy's rail).
"""

from __future__ import annotations

import shlex
import threading
import time
from typing import Any, Optional

from sparkctl.errors import HostError, SparkctlError
from sparkctl.facts.weights import (
    HF_METADATA,
    RECORD,
    ManifestFile,
    WeightsRecord,
    hash_command,
    parse_hashes,
    previous_path,
    staging_path,
    stat_command,
)
from sparkctl.inventory.models import Inventory
from sparkctl.launch.plan import LAUNCHER
from sparkctl.placement import FolderCheckpoint, Placement, placements
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.steps.transfer import Transfer, duration, gb
from sparkctl.weights.manifest import Manifest

PROGRESS_EVERY = 2.0  # seconds between progress lines of a transfer
# What one rsync over ssh moves between Sparks, whatever the rail: 0.38-0.45 GB/s measured in the
# field (unsloth PR #10280, MiaAI's DSV4.1 recipe: shared/reference/field-notes-wave4.md); the
# estimate --check prints takes the lower of it and the rail's speed
SSH_COPY_RATE = 0.45e9


def rate(data: dict, since: float) -> str:
    """' in 1.7 s (118 MB/s)': how long a transfer took, and the bytes it moved in that time."""
    took = max(1e-3, time.monotonic() - since)
    return f" in {took:.1f} s ({(data['bytes'] - data.get('staged', 0)) / took / 1e6:.0f} MB/s)"


def copy_rate(nominal_gbps: float, measured_gbps: Optional[float], unmeasured: str = "") -> tuple[float, str]:
    """The bytes per second a copy over a rail is expected to move, and why: the lower of the rail
    (as measured in this run, else its nominal speed) and one rsync over ssh."""
    rail_rate = (measured_gbps or nominal_gbps) * 1e9 / 8
    if measured_gbps:
        rail_words = f"the rail measured {measured_gbps:.1f} Gb/s in this run"
    else:
        rail_words = f"the rail unmeasured ({unmeasured}): its nominal {nominal_gbps:g} Gb/s"
    if rail_rate < SSH_COPY_RATE:
        return rail_rate, rail_words
    return SSH_COPY_RATE, f"rsync over ssh; {rail_words}"


def rotate_script(path: str, rotate: dict) -> str:
    """Shell: staging completed with hard links (rotate's `keep` from the path, `reuse` from the kept
    previous version), the current copy moved aside to previous_path whole, staging into the path."""
    staging, kept = staging_path(path), previous_path(path)
    p, st, pv = shlex.quote(path), shlex.quote(staging), shlex.quote(kept)
    steps = [f"mkdir -p {st}"]
    for folder, names in ((path, rotate["keep"]), (kept, rotate["reuse"])):
        for n in names:
            sub = n.rpartition("/")[0]
            steps.append(
                (f"mkdir -p {shlex.quote(staging + '/' + sub)} && " if sub else "")
                + f"ln -f {shlex.quote(folder + '/' + n)} {shlex.quote(staging + '/' + n)}"
            )
    steps += [f"rm -rf {st}/{HF_METADATA} {st}/.sparkctl-weights.*", f"rm -rf {pv}", f"mv -T {p} {pv}", f"mv -T {st} {p}"]
    return " && ".join(steps)


def rail(inv: Inventory, src: str, dst: str) -> Optional[tuple[str, str, str, float]]:
    """The first fabric rail from `src` to `dst`: (src device, src address, dst address, Gb/s)."""
    for link in inv.hosts[src].fabric:
        if link.peer != dst:
            continue
        back = [b for b in inv.hosts[dst].fabric if b.peer == src and b.address.network == link.address.network]
        if back:
            return link.device, str(link.address.ip), str(back[0].address.ip), link.speed_gbps
    return None


class WeightsStep(Step):
    name = "weights"
    facts = frozenset({"weights", "weights_hashes", "weights_source", "tools"})

    def hosts(self, inv: Inventory) -> list[str]:
        # downloading hosts first: the others copy from them (the playbook applies in this order)
        ps = placements(inv)
        return list(dict.fromkeys([p.host for p in ps if p.downloads] + [p.host for p in ps]))

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        # one checkpoint per host: the model's on engine nodes, the drafter's on an offload host (validate.py)
        plans: dict[str, Plan] = {}
        for kind in ("model", "drafter"):
            group = [p for p in placements(ctx.inventory) if p.kind == kind and p.host in ctx.facts]
            if not group:
                continue
            try:
                manifest = self._manifest(ctx, group)
            except SparkctlError as exc:
                why = exc.message + (f" (fix: {exc.fix})" if exc.fix else "")
                plans.update({p.host: self.blocked(p.host, why) for p in group})
                continue
            plans.update({p.host: self._plan_placement(ctx, p, manifest) for p in group})
        return plans

    def _manifest(self, ctx: RunContext, group: list[Placement]) -> Manifest:
        """A folder source's SHA256SUMS; for the hub, a verified record of this checkpoint on one of
        its nodes (no hub contact), else the hub's."""
        from sparkctl.weights.hub import manifest
        from sparkctl.weights.manifest import folder_manifest

        ckpt = group[0].checkpoint
        if isinstance(ckpt, FolderCheckpoint):
            source = ctx.facts[ckpt.host].weights_source
            if source is None:
                raise SparkctlError(
                    f"cannot read {ckpt.directory} on {ckpt.host}: "
                    f"{ctx.facts[ckpt.host].errors.get('weights_source', 'no answer')}"
                )
            return folder_manifest(ckpt.host, source)
        for p in sorted(group, key=lambda p: not p.downloads):
            copy = ctx.facts[p.host].weights.get(p.path)
            # the copy at the path, or the version kept beside it (a rollback: no hub either)
            for r in (copy.record, copy.previous.record if copy.previous else None) if copy else ():
                if r is not None and r.names(ckpt):
                    return Manifest(r.repo, r.revision, r.commit, dict(r.files))
        w = ctx.inventory.weights
        assert w is not None
        return manifest(w, ckpt, "weights" if group[0].kind == "model" else "weights.drafter")

    def _plan_placement(self, ctx: RunContext, p: Placement, manifest: Manifest) -> Plan:
        f = ctx.facts[p.host]
        copy = f.weights.get(p.path)
        if copy is None:
            return self.blocked(p.host, f"cannot read {p.path}: {f.errors.get('weights', 'no answer')}")
        if copy.not_a_directory:
            return self.blocked(p.host, f"{p.path} exists but is not a folder: move it away, then rerun `sparkctl up`")
        if copy.links:
            return self.blocked(
                p.host,
                f"{p.path} holds symbolic links ({', '.join(copy.links[:2])}): a hub cache's links point into a "
                "blobs folder a copy does not carry; replace the folder with real files (`hf download --local-dir`) "
                "or remove it and rerun `sparkctl up`",
            )
        hashes = f.weights_hashes.get(p.path, {})
        # of the right size, verified earlier under another kind of digest: hashed again, not fetched
        unknown = sorted(
            n for n, m in manifest.files.items() if copy.files.get(n) == m.size and n in hashes and not m.comparable(hashes[n])
        )
        bad = sorted(
            n
            for n, m in manifest.files.items()
            if n not in unknown and (copy.files.get(n) != m.size or n not in hashes or not m.matches(hashes[n]))
        )
        source = f"{manifest.repo}@{manifest.commit[:12]}"
        data: dict[str, Any] = {
            "path": p.path,
            "kind": p.kind,
            "checkpoint": p.checkpoint,
            "manifest": manifest,
            "source_host": p.source_host,
        }
        if not bad and unknown:
            return self.changes(
                p.host,
                [
                    Change(
                        "verify",
                        f"hash {len(unknown)} file(s) verified earlier under another digest ({', '.join(unknown[:3])}), "
                        f"then record {p.kind} {source} as verified in {p.path}",
                        {**data, "files": unknown},
                    )
                ],
            )
        if not bad:
            rec = copy.record
            if rec is not None and rec.names(p.checkpoint) and rec.files == manifest.files:
                moved = sorted(n for n, h in hashes.items() if h.rehashed and n in manifest.files)
                if not moved:
                    return self.noop(
                        p.host,
                        f"{p.kind} {source}: {len(manifest.files)} file(s), {gb(manifest.bytes)} "
                        f"in {p.path}, every digest verified",
                    )
                why = f"{len(moved)} re-hashed file(s) still match"
            else:
                why = "the files match, no record of it yet"
            return self.changes(p.host, [Change("record", f"record {p.kind} {source} as verified in {p.path} ({why})", data)])
        # files verified under another kind of digest, beside files to fetch: small (kept in git), fetched too
        bad = sorted(set(bad) | set(unknown))
        folder = p.checkpoint if isinstance(p.checkpoint, FolderCheckpoint) else None
        source_here = folder is not None and p.downloads and folder.directory.rstrip("/") == p.path.rstrip("/")
        rotate = None
        rec = copy.record
        if rec is not None and not rec.names(p.checkpoint) and copy.files and not source_here:
            # another version at the path: the new one is built beside it (links of the files both
            # share, the rest fetched), then the old one moves aside whole, so a rollback needs no download
            prev = copy.previous
            reuse = [n for n in bad if prev is not None and prev.holds(n, manifest.files[n])]
            rotate = {
                "keep": sorted(n for n in manifest.files if n not in bad),
                "reuse": reuse,
                # the old version's files as it verified them: the only ones its kept record vouches for
                "trusted": sorted(
                    n for n, m in rec.files.items() if copy.files.get(n) == m.size and n in hashes and m.matches(hashes[n])
                ),
                "old": f"{rec.repo}@{rec.commit[:12]}",
            }
            bad = [n for n in bad if n not in reuse]
            data = {**data, "rotate": rotate}
            if not bad:
                return self.changes(
                    p.host,
                    [
                        Change(
                            "restore",
                            f"put {p.kind} {source} back from {previous_path(p.path)}, where it was kept verified: "
                            f"{len(reuse)} file(s) from there and {len(rotate['keep'])} the current {rotate['old']} "
                            f"shares, linked, nothing fetched; {rotate['old']} moves aside in its place",
                            {**data, "files": [], "bytes": 0, "staged": 0, "replace": False},
                        )
                    ],
                )
        need = sum(manifest.files[n].size for n in bad)
        staged = sum(min(copy.staging.get(n, 0), manifest.files[n].size) for n in bad)
        if copy.free_bytes is not None and need - staged > copy.free_bytes:
            kept = ""
            if copy.previous is not None and copy.previous.files:  # never removed behind the operator's back
                old = copy.previous.record
                kept = (
                    f" (the previous version kept for a rollback, {f'{old.repo}@{old.commit[:12]}, ' if old else ''}"
                    f"holds {gb(sum(copy.previous.files.values()))} in {previous_path(p.path)}: remove it there if you "
                    "will not go back to it)"
                )
            return self.blocked(
                p.host,
                f"{p.path} needs {gb(need - staged)} more ({len(bad)} file(s), {gb(staged)} of them already staged) "
                f"and its filesystem has {gb(copy.free_bytes)} free: free {gb(need - staged - copy.free_bytes)} there{kept} "
                "or point runtime.model at a larger disk",
            )
        wrong = [n for n in bad if n in copy.files] if rotate is None else []
        what = f"{len(bad)} file(s), {gb(need)}" + (f" ({len(wrong)} of them wrong: {', '.join(wrong[:3])})" if wrong else "")
        what += f", {gb(staged)} of it staged by a cut transfer (resumed)" if staged else ""
        data = {**data, "files": bad, "bytes": need, "staged": staged, "replace": bool(copy.files) and rotate is None}
        into = f"move into {p.path}"
        if rotate is not None:
            shared = len(rotate["keep"]) + len(rotate["reuse"])
            into = (
                f"link the {shared} file(s) it shares with the copies there, then move the current {rotate['old']} "
                f"aside to {previous_path(p.path)} (kept whole: a rollback needs no download) and this one into {p.path}"
            )
        if source_here:
            return self.blocked(
                p.host,
                f"the folder source {p.path} itself: {what} do not match its SHA256SUMS: restore them from a copy you "
                "trust (or, if the files are right, write SHA256SUMS again); sparkctl never spreads them",
            )
        if folder is not None and p.downloads:
            return self.changes(
                p.host,
                [
                    Change(
                        "place",
                        f"copy {p.kind} {source}: {what} from {folder.directory} into {staging_path(p.path)}, verify, {into}",
                        {**data, "directory": folder.directory},
                    )
                ],
            )
        if p.downloads:
            w = ctx.inventory.weights
            assert w is not None
            return self.changes(
                p.host,
                [
                    Change(
                        "download",
                        f"download {p.kind} {source}: {what} from {w.endpoint} into {staging_path(p.path)}, verify, {into}",
                        data,
                    )
                ],
            )
        route = rail(ctx.inventory, p.source_host, p.host)
        if route is None:
            return self.blocked(
                p.host,
                f"no fabric rail between {p.source_host} and {p.host} in the inventory: the weights are copied over "
                "the fabric, never the management network; give both hosts a rail with peer set to the other",
            )
        device, src_ip, dst_ip, gbps = route
        without = [h for h in (p.source_host, p.host) if "rsync" not in (ctx.facts[h].tools or ())]
        if without:
            return self.blocked(
                p.host,
                f"rsync is missing on {' and '.join(without)} (it copies between nodes): "
                f"`apt-get install rsync` there (doctor: host.tools)",
            )
        rate, bound = copy_rate(gbps, *self._measured(ctx, p.source_host, p.host, device))
        return self.changes(
            p.host,
            [
                Change(
                    "copy",
                    f"copy {p.kind} {source}: {what} from {p.source_host} ({src_ip}) over {device} to {dst_ip}, "
                    f"~{duration((need - staged) / rate)} at {rate / 1e6:.0f} MB/s ({bound}); verify, {into}",
                    {**data, "from_address": src_ip, "to_address": dst_ip, "device": device},
                )
            ],
        )

    def _measured(self, ctx: RunContext, src: str, dst: str, device: str) -> tuple[Optional[float], str]:
        """The rail's Gb/s measured in this run (the fabric step's probe after a change), else, in
        --check, measured now with the same probe (iperf3, 1 s: what --check's estimate is for);
        (None, why) when it is not. A real run's copy reports its own rate as it goes."""
        from sparkctl.facts import bandwidth

        if (src, device) in ctx.outputs.rail_gbps:
            return ctx.outputs.rail_gbps[(src, device)], ""
        if not ctx.check_mode or ctx.fleet is None:
            return None, "not probed in this run"
        chosen = [r for r in bandwidth.rails(ctx.inventory, [src, dst]) if r.end(src) == device]
        results = bandwidth.measure(ctx.sessions, chosen)
        ctx.outputs.rail_gbps.update(bandwidth.measured_ends(chosen, results))
        if (src, device) in ctx.outputs.rail_gbps:
            return ctx.outputs.rail_gbps[(src, device)], ""
        failed = next((r for r in results.values() if r.error), None)
        if failed is not None and failed.missing_tool:
            return None, "iperf3 is missing"
        return None, f"the probe failed: {failed.error[:80]}" if failed and failed.error else "not probed"

    # --- apply -----------------------------------------------------------------------------

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        done = []
        for c in plan.changes:
            t0 = time.monotonic()
            if c.action == "download":
                self._download(ctx, plan.host, c.data)
                done.append(f"downloaded {len(c.data['files'])} file(s), {gb(c.data['bytes'])}{rate(c.data, t0)}")
            elif c.action == "verify":
                self._verify_in_place(ctx, plan.host, c.data)
                done.append(f"hashed {len(c.data['files'])} file(s) in place")
            elif c.action == "restore":
                self._rotate(ctx, plan.host, c.data)
                r = c.data["rotate"]
                done.append(
                    f"put back from {previous_path(c.data['path'])}: {len(r['reuse']) + len(r['keep'])} file(s) linked, "
                    f"nothing fetched; {r['old']} kept there"
                )
            elif c.action == "place":
                self._from_folder(ctx, plan.host, c.data)
                done.append(
                    f"copied {len(c.data['files'])} file(s), {gb(c.data['bytes'])} from {c.data['directory']}{rate(c.data, t0)}"
                )
            elif c.action == "copy":
                self._copy(ctx, plan.host, c.data)
                done.append(
                    f"copied {len(c.data['files'])} file(s), {gb(c.data['bytes'])} from {c.data['source_host']}{rate(c.data, t0)}"
                )
            if c.action in ("download", "place", "copy"):
                self._verify_and_place(ctx, plan.host, c.data)
            self._record(ctx, plan.host, c.data)
            m = c.data["manifest"]
            done.append(f"{c.data['kind']} {m.repo}@{m.commit[:12]} verified in {c.data['path']}")
        return "; ".join(done)

    def _image(self, ctx: RunContext, host: str, kind: str) -> str:
        role = "drafter" if kind == "drafter" else None
        for c in ctx.launch.containers:
            if c.host == host and c.role != "gateway" and (role is None or c.role == role):
                return c.image
        return ctx.inventory.runtime.image

    def _download(self, ctx: RunContext, host: str, data: dict) -> None:
        from sparkctl.weights.hub import token

        w = ctx.inventory.weights
        assert w is not None
        s = ctx.session(host)
        path, staging, m = data["path"], staging_path(data["path"]), data["manifest"]
        parent = path.rsplit("/", 1)[0] or "/"
        # started the way every container of the launch is (its LAUNCHER, not the image's ENTRYPOINT)
        hf = [
            "docker",
            "run",
            "--rm",
            "--network=host",
            f"--entrypoint={LAUNCHER[0]}",
            "-v",
            f"{parent}:{parent}",
            "-e",
            f"HF_ENDPOINT={w.endpoint}",
            "-e",
            "HF_TOKEN",
            "-e",
            "HF_HUB_DISABLE_TELEMETRY=1",
            "-e",
            "HF_HUB_DISABLE_PROGRESS_BARS=1",
            "-e",
            "HF_HUB_DISABLE_UPDATE_CHECK=1",
            self._image(ctx, host, data["kind"]),
            *LAUNCHER[1:],
            "hf",
            "download",
            m.repo,
            *data["files"],
            "--revision",
            m.commit,
            "--local-dir",
            staging,
        ]
        # the token arrives on stdin: in no command line, no process listing, no log
        script = (
            f'mkdir -p {shlex.quote(staging)} && IFS= read -r HF_TOKEN; [ -n "$HF_TOKEN" ] && export HF_TOKEN; '
            f"exec {shlex.join(hf)} >/dev/null"
        )
        with self._progress(ctx, host, staging, data, f"downloading from {w.endpoint}"):
            r = s.run(
                ["sh", "-c", script], timeout=s.transfer_timeout(data["bytes"]) + 60, stdin=((token(w) or "") + "\n").encode()
            )
        if not r.ok:
            tail = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1][:300]
            raise HostError(
                f"{host}: hf download of {m.repo}@{m.commit[:12]} failed: {tail}",
                fix="what was downloaded stays staged and the next `sparkctl up` resumes it; "
                f"check that {host} reaches {w.endpoint} (and the token, for a gated repo)",
            )

    def _from_folder(self, ctx: RunContext, host: str, data: dict) -> None:
        """A folder source's files into staging on the same host (a reflink where the filesystem can)."""
        s, staging = ctx.session(host), staging_path(data["path"])
        files = " ".join(shlex.quote(n) for n in data["files"])
        script = (
            f"mkdir -p {shlex.quote(staging)} && cd {shlex.quote(data['directory'])} && "
            f"cp -p --reflink=auto --parents -- {files} {shlex.quote(staging)}/"
        )
        with self._progress(ctx, host, staging, data, f"copying from {data['directory']}"):
            r = s.run(script, timeout=s.transfer_timeout(data["bytes"]) + 60)
        if not r.ok:
            tail = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1][:300]
            raise HostError(
                f"{host}: copying from {data['directory']} failed: {tail}",
                fix="check the folder and the free space under runtime.model; what was copied stays "
                "staged and is verified before use",
            )

    def _verify_in_place(self, ctx: RunContext, host: str, data: dict) -> None:
        s, files, manifest = ctx.session(host), data["files"], data["manifest"].files
        size = sum(manifest[n].size for n in files)
        r = s.run(hash_command(data["path"], only_changed=False, names=files), timeout=s.transfer_timeout(size))
        got = parse_hashes(r.stdout)
        bad = [n for n in files if n not in got or not manifest[n].matches(got[n])]
        if bad:
            raise HostError(
                f"{host}: {len(bad)} file(s) in {data['path']} do not match {data['manifest'].repo}: {', '.join(bad[:3])}",
                fix="rerun `sparkctl up`: it fetches those files again (a folder source itself: restore them)",
            )

    def _copy(self, ctx: RunContext, host: str, data: dict) -> None:
        from sparkctl.transport.images import SSH_OPTIONS

        src, path, staging = data["source_host"], data["path"], staging_path(data["path"])
        ctx.session(host).run(["mkdir", "-p", staging]).check("create the weights' staging folder")
        # a rail that drops mid-copy stalls the stream without an error: rsync gives up after this long
        # without a byte (three times the time a connected host may leave a keepalive unanswered)
        stall = max(3, int(3 * ctx.session(src).target.connect_timeout))
        rsync = [
            "rsync",
            "-rt",
            "--partial",
            "--append-verify",
            "--files-from=-",
            "--from0",
            f"--timeout={stall}",
            "-e",
            shlex.join(["ssh", *SSH_OPTIONS]),
            f"{path}/",
            f"{data['to_address']}:{staging}/",
        ]
        files = "\0".join(data["files"]).encode()
        with self._progress(ctx, host, staging, data, f"copying from {src} over {data['device']}"):
            r = ctx.session(src).run(rsync, timeout=ctx.session(src).transfer_timeout(data["bytes"]) + 60, stdin=files)
        if not r.ok:
            tail = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1][:300]
            raise HostError(
                f"{host}: rsync from {src} ({data['from_address']}) to {data['to_address']} failed: {tail}",
                fix=f"check the rail {data['device']} (`sparkctl doctor --only fabric`) and that {src} can SSH to "
                f"{data['to_address']}; what arrived stays staged and the next `sparkctl up` resumes it",
            )

    def _progress(self, ctx: RunContext, host: str, folder: str, data: dict, doing: str) -> "_Progress":
        return _Progress(ctx, host, self.name, folder, data["bytes"], data.get("staged", 0), doing)

    def _verify_and_place(self, ctx: RunContext, host: str, data: dict) -> None:
        s = ctx.session(host)
        path, staging, files = data["path"], staging_path(data["path"]), data["files"]
        manifest: dict[str, ManifestFile] = data["manifest"].files
        ctx.progress(host, self.name, f"verifying {len(files)} file(s), {gb(data['bytes'])}")
        r = s.run(hash_command(staging, only_changed=False, names=files), timeout=s.transfer_timeout(data["bytes"]))
        got = parse_hashes(r.stdout)
        bad = [n for n in files if n not in got or not manifest[n].matches(got[n])]
        if bad:
            s.run(f"cd {shlex.quote(staging)} && rm -f -- {' '.join(shlex.quote(n) for n in bad)}")
            raise HostError(
                f"{host}: {len(bad)} file(s) do not match the manifest's digest after the transfer: {', '.join(bad[:3])} "
                "(removed from staging; nothing was moved into place)",
                fix="rerun `sparkctl up` (it fetches those files again); if it repeats, check the disk (dmesg) "
                "and, for a download, the hub or mirror",
            )
        p, st = shlex.quote(path), shlex.quote(staging)
        if data.get("rotate"):  # another version there: it moves aside whole, this one takes its place
            self._rotate(ctx, host, data)
            place = ""
        elif data["replace"]:  # a copy already there: each verified file replaces its old one (a rename)
            moves = " && ".join(
                f"mkdir -p {shlex.quote(path + '/' + n.rpartition('/')[0])} && mv -f {st}/{shlex.quote(n)} {p}/{shlex.quote(n)}"
                if "/" in n
                else f"mv -f {st}/{shlex.quote(n)} {p}/{shlex.quote(n)}"
                for n in files
            )
            place = f"{moves} && rm -rf {st}"
        else:  # no copy yet: the whole verified folder is renamed into place
            # (an empty folder there, as `docker run -v` leaves one, or only sparkctl's old records, goes first)
            place = (
                f"rm -rf {st}/{HF_METADATA} && if [ -d {p} ]; then rm -f {p}/.sparkctl-weights.*; rmdir {p} || exit 3; fi "
                f"&& mv -T {st} {p}"
            )
        if place:
            s.run(place, timeout=s.timeout + len(files)).check(f"move the verified weights into {path}")
        # page cache of what was written and hashed: dropped before the engine loads (unified memory)
        drop = " ".join(f"{p}/{shlex.quote(n)}" for n in files)
        s.run(f'for f in {drop}; do dd if="$f" iflag=nocache count=0 status=none; done; true', timeout=s.timeout + len(files))

    def _rotate(self, ctx: RunContext, host: str, data: dict) -> None:
        """Complete the new version in staging with hard links (the files it shares with the current
        copy, and those the kept previous version holds: no bytes copied, no space used), then move
        the current copy aside to previous_path whole (with its records: a rollback puts it back the
        same way) and staging into the path. Between the two renames the path is absent, never partial."""
        s, r = ctx.session(host), data["rotate"]
        path, kept = data["path"], previous_path(data["path"])
        files = len(r["keep"]) + len(r["reuse"])
        s.run(rotate_script(path, r), timeout=s.timeout + files).check(
            f"move {r['old']} aside to {kept} and the new weights into {path}"
        )
        # a link moves the ctime of the file it names: the kept version's stat record is written again,
        # for the files it had verified alone
        s.run(stat_command(kept, only_stdin=True), stdin=("".join(n + "\n" for n in r["trusted"])).encode()).check(
            f"record the kept weights' sizes and ctimes in {kept}"
        )

    def _record(self, ctx: RunContext, host: str, data: dict) -> None:
        s, m, path, ckpt = ctx.session(host), data["manifest"], data["path"], data["checkpoint"]
        rec = WeightsRecord(m.repo, ckpt.revision, m.commit, dict(m.files), tuple(ckpt.include), tuple(ckpt.exclude))
        s.put_bytes(rec.to_json().encode(), f"{path}/{RECORD}")
        s.run(stat_command(path)).check("record the verified weights' sizes and ctimes")


class _Progress:
    """A transfer's progress, read from the receiving folder's size every few seconds (one line
    per interval): bytes, rate and time left. The transfer tools' own bars are not parsed."""

    def __init__(self, ctx: RunContext, host: str, step: str, folder: str, total: int, staged: int, doing: str):
        self.ctx, self.host, self.step, self.folder = ctx, host, step, folder
        self.total, self.start_bytes, self.doing = total, staged, doing
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"weights-progress-{host}", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> "_Progress":
        self.started = time.monotonic()  # the rate is the average since the transfer began
        self.ctx.progress(self.host, self.step, Transfer(self.doing, self.start_bytes, self.total))
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def _run(self) -> None:
        cmd = f"du -sb --apparent-size {shlex.quote(self.folder)} 2>/dev/null | cut -f1"
        while not self.stop.wait(PROGRESS_EVERY):
            try:
                out = self.ctx.session(self.host).run(cmd, timeout=10).stdout.strip()
            except SparkctlError:
                return
            if not out.isdigit():
                continue
            now = int(out)
            rate = max(0, now - self.start_bytes) / max(1e-3, time.monotonic() - self.started)
            self.ctx.progress(self.host, self.step, Transfer(self.doing, now, self.total, rate))
