"""The weights step's plans and doctor's weights checks, from the fact layer's parse of the probes'
output (made up here in the probes' own format: a listing, a record, the free bytes; no host).

The manifest comes from a node's record when one names the inventory's checkpoint, so these plans
never contact a hub; tests/unit/test_weights_hub.py asks the lab's hub with the real client."""

from __future__ import annotations

import copy
import hashlib

import pytest
import yaml
from hostfacts import ROOT, host_facts, sec

from sparkctl.checks import REGISTRY
from sparkctl.checks.base import Context
from sparkctl.facts.weights import ManifestFile, WeightsRecord, hash_command, parse_hashes, parse_weights, staging_path
from sparkctl.inventory.models import Inventory
from sparkctl.inventory.validate import check_inventory
from sparkctl.steps.base import RunContext
from sparkctl.steps.weights import WeightsStep, copy_rate

MODEL = "/models/DeepSeek-V4.1-Flash-1017"
REPO, COMMIT = "deepseek-ai/DeepSeek-V4.1-Flash-lab", "c0ffee" + "0" * 34
SHARDS = {f"model-0000{i}-of-00003.safetensors": 1000 + i for i in (1, 2, 3)}
SMALL = {"config.json": 120}
FILES = {**SHARDS, **SMALL}


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def blob(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


MANIFEST = {n: ManifestFile(s, sha256=sha(n)) for n, s in SHARDS.items()} | {
    n: ManifestFile(s, git=blob(n)) for n, s in SMALL.items()
}


def lab_doc(**weights) -> dict:
    doc = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    doc["weights"] = {"repo": REPO, "revision": "main", "endpoint": "http://127.0.0.1:9", **weights}
    doc.pop("engram", None)
    return doc


INV = Inventory.model_validate(lab_doc())


def record(revision: str = "main", files=MANIFEST) -> str:
    return WeightsRecord(REPO, revision, COMMIT, dict(files)).to_json()


def folder(files=FILES, rec: str = "", free: int = 10**12, links: str = "", staging: dict | None = None, present=True) -> str:
    """The `weights` probe's output for one folder."""
    listing = "".join(f"{size} 1733390000.0000000000 {name}\n" for name, size in files.items())
    staged = "".join(f"{size} 1733390000.0000000000 {name}\n" for name, size in (staging or {}).items())
    return ("@@dir\n" + ("present\n" + listing if present else "") + f"@@links\n{links}@@record\n{rec}"
            f"@@staging\n{staged}@@free\n{free}\n")  # fmt: skip


# the `tools` fact on a lab host (`command -v` of each tool sparkctl runs there)
TOOLS = "/usr/local/bin/nvidia-container-runtime-hook\n/usr/bin/iperf3\n/usr/bin/rsync\n"


def unchanged(files=FILES) -> str:
    return "".join(f"unchanged {n}\n" for n in files)


def facts(inv=INV, head=None, worker=None, head_hashes=None, worker_hashes=None, worker_tools=TOOLS, head_source=None):
    head = folder(rec=record()) if head is None else head
    worker = folder(rec=record()) if worker is None else worker
    source = {} if head_source is None else {"weights_source": sec(head_source)}
    return {
        "head": host_facts(inv, "head", weights__0=sec(head), weights_hashes__0=sec(unchanged() if head_hashes is None else head_hashes),
                           tools=sec(TOOLS), **source),
        "worker": host_facts(inv, "worker", weights__0=sec(worker), weights_hashes__0=sec(unchanged() if worker_hashes is None else worker_hashes),
                             tools=sec(worker_tools)),
    }  # fmt: skip


def plans(inv=INV, **kw):
    return WeightsStep().plan(RunContext(inventory=inv, fleet=None, facts=facts(inv, **kw)))


def doctor(inv=INV, deep=False, **kw):
    f = facts(inv, **kw)
    ctx = Context(inventory=inv, hosts=list(f), facts=f, deep=deep)
    return {(r.name, r.host): r for name in ("weights.present", "weights.verified") for r in REGISTRY[name].run(ctx)}


def test_verified_everywhere_is_a_noop_that_names_the_source_and_never_asks_the_hub():
    # the endpoint is a closed port: a hub call would block the plan
    p = plans()
    assert p["head"].empty and p["worker"].empty
    assert f"{REPO}@{COMMIT[:12]}: 4 file(s)" in p["worker"].reason and "every digest verified" in p["worker"].reason
    r = doctor()
    assert r[("weights.verified", "worker")].status == "ok"


def test_a_worker_without_the_model_copies_every_file_from_the_head_over_the_first_rail():
    p = plans(worker=folder(files={}, present=False), worker_hashes="")
    (c,) = p["worker"].changes
    assert c.action == "copy" and c.data["files"] == sorted(FILES)
    assert (c.data["device"], c.data["from_address"], c.data["to_address"]) == ("enp1s0f0np0", "10.231.100.2", "10.231.100.3")
    assert c.data["bytes"] == sum(FILES.values()) and not c.data["replace"]
    assert (
        "from head (10.231.100.2) over enp1s0f0np0 to 10.231.100.3" in c.summary
        and "125 MB/s (the rail)" not in c.summary
        and "450 MB/s" in c.summary
    )
    assert p["head"].empty
    r = doctor(worker=folder(files={}, present=False), worker_hashes="")
    assert r[("weights.verified", "worker")].status == "failed" and "absent" in r[("weights.verified", "worker")].message
    assert r[("weights.present", "worker")].status == "warn"  # up places it: not a preflight blocker


def test_the_copy_time_comes_from_the_rails_rate_measured_in_this_run_else_says_unmeasured():
    # the lab's rails say 200 Gb/s and are shaped to 1 Gb/s: only a measurement shows it
    absent = {"worker": folder(files={}, present=False), "worker_hashes": ""}
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(INV, **absent))
    ctx.outputs.rail_gbps[("head", "enp1s0f0np0")] = 0.94  # the fabric step's probe, earlier in the run
    (c,) = WeightsStep().plan(ctx)["worker"].changes
    assert "at 118 MB/s (the rail measured 0.9 Gb/s in this run)" in c.summary, c.summary
    (c,) = plans(**absent)["worker"].changes
    assert "at 450 MB/s (rsync over ssh; the rail unmeasured (not probed in this run): its nominal 200 Gb/s)" in c.summary
    # a degraded ConnectX-7 (13 Gb/s) is still above one rsync over ssh; a 20 MB/s link is not
    assert copy_rate(200, 13.0) == (450e6, "rsync over ssh; the rail measured 13.0 Gb/s in this run")
    assert copy_rate(200, 0.16)[0] == 20e6


def test_a_flipped_byte_on_the_worker_copies_that_file_alone_and_doctor_names_it():
    shard = "model-00002-of-00003.safetensors"
    # its size is the same; its ctime moved, so the fact re-hashed it, and the digest differs
    hashes = unchanged({n: s for n, s in FILES.items() if n != shard}) + f"s {'f' * 64} {shard}\n"
    (c,) = plans(worker_hashes=hashes)["worker"].changes
    assert c.action == "copy" and c.data["files"] == [shard] and c.data["replace"]
    assert f"1 of them wrong: {shard}" in c.summary
    r = doctor(worker_hashes=hashes)[("weights.verified", "worker")]
    assert r.status == "failed" and "1 file(s) whose digest no longer matches" in r.message and shard in r.message


def test_a_corrupt_head_downloads_again_instead_of_spreading():
    shard = "model-00001-of-00003.safetensors"
    hashes = unchanged({n: s for n, s in FILES.items() if n != shard}) + f"s {'0' * 64} {shard}\n"
    p = plans(head_hashes=hashes)
    (c,) = p["head"].changes
    assert c.action == "download" and c.data["files"] == [shard]
    assert WeightsStep().hosts(INV)[0] == "head"  # the download host applies first; the worker copies after


def test_a_node_without_the_space_is_refused_before_a_byte_moves_counting_what_is_staged():
    need = sum(FILES.values())
    staged = {"model-00001-of-00003.safetensors": 1001}
    p = plans(worker=folder(files={}, present=False, free=need - 1001 - 1, staging=staged), worker_hashes="")
    assert p["worker"].blocked and "1001 of them already staged" not in p["worker"].blocked
    assert "needs 0.00 GB more" in p["worker"].blocked and "free" in p["worker"].blocked
    ok = plans(worker=folder(files={}, present=False, free=need - 1001, staging=staged), worker_hashes="")
    assert ok["worker"].changes[0].data["staged"] == 1001


def test_symlinks_in_a_model_folder_are_refused_not_copied():
    p = plans(worker=folder(links="model-00001-of-00003.safetensors -> ../../blobs/abc\n"))
    assert p["worker"].blocked and "symbolic links" in p["worker"].blocked


def test_rehashed_files_that_still_match_are_recorded_so_the_next_run_hashes_nothing():
    shard = "model-00003-of-00003.safetensors"
    hashes = unchanged({n: s for n, s in FILES.items() if n != shard}) + f"s {sha(shard)} {shard}\n"
    (c,) = plans(worker_hashes=hashes)["worker"].changes
    assert c.action == "record" and "1 re-hashed file(s) still match" in c.summary


def test_a_record_of_another_revision_or_patterns_is_not_taken_as_the_manifest():
    rec = WeightsRecord(REPO, "v1", COMMIT, dict(MANIFEST))
    assert rec.names(INV.weights.model_copy(update={"revision": COMMIT}))
    assert not rec.names(INV.weights.model_copy(update={"revision": "v2"}))
    assert not rec.names(INV.weights.model_copy(update={"revision": COMMIT, "exclude": ["original/*"]}))


def test_no_record_anywhere_asks_the_hub_and_an_unreachable_hub_blocks_with_the_fix():
    p = plans(head=folder(files={}, present=False), worker=folder(files={}, present=False), head_hashes="", worker_hashes="")
    for host in ("head", "worker"):
        assert p[host].blocked and "cannot reach the model hub http://127.0.0.1:9" in p[host].blocked


def test_the_hash_command_and_its_parser_agree_on_real_files(tmp_path):
    import subprocess

    (tmp_path / "original").mkdir()
    (tmp_path / "config.json").write_bytes(b'{"a": 1}\n')
    (tmp_path / "original" / "w.bin").write_bytes(b"\0" * 5000)
    out = subprocess.run(["sh", "-c", hash_command(str(tmp_path), only_changed=False)], capture_output=True, text=True).stdout
    got = parse_hashes(out)
    assert got["config.json"].sha256 == hashlib.sha256(b'{"a": 1}\n').hexdigest()
    # the hub's id of a file kept in git: sha1 of "blob <size>\0" + content (what `git hash-object` prints)
    assert got["config.json"].git == hashlib.sha1(b'blob 9\0{"a": 1}\n').hexdigest()
    assert got["original/w.bin"].sha256 == hashlib.sha256(b"\0" * 5000).hexdigest()


def test_a_file_the_stat_record_vouches_for_is_not_hashed_again_and_a_touched_one_is(tmp_path):
    import subprocess

    from sparkctl.facts.weights import stat_command

    (tmp_path / "original").mkdir()
    (tmp_path / "config.json").write_bytes(b'{"a": 1}\n')
    (tmp_path / "original" / "w bin").write_bytes(b"\0" * 5000)  # a space in the name, as the hub allows
    subprocess.run(["sh", "-c", stat_command(str(tmp_path))], check=True)
    out = subprocess.run(["sh", "-c", hash_command(str(tmp_path))], capture_output=True, text=True).stdout
    assert sorted(out.splitlines()) == ["unchanged config.json", "unchanged original/w bin"]
    (tmp_path / "original" / "w bin").write_bytes(b"\1" * 5000)  # rewritten: its ctime moves
    out = subprocess.run(["sh", "-c", hash_command(str(tmp_path))], capture_output=True, text=True).stdout
    assert "unchanged config.json" in out.splitlines()
    assert parse_hashes(out)["original/w bin"].sha256 == hashlib.sha256(b"\1" * 5000).hexdigest()


def test_staging_is_a_hidden_sibling_on_the_same_filesystem():
    assert staging_path("/models/DeepSeek-V4-Flash") == "/models/.DeepSeek-V4-Flash.sparkctl-staging"
    assert staging_path("/models/DeepSeek-V4-Flash/") == "/models/.DeepSeek-V4-Flash.sparkctl-staging"


def test_a_cut_record_verifies_nothing():
    assert parse_weights(MODEL, folder(rec='{"repo": "x", "files": {')).record is None


@pytest.mark.parametrize(
    "weights, runtime, field, words",
    [
        ({"download_host": "offload"}, {}, "weights.download_host", "runs the engine"),
        ({"download_host": "wrker"}, {}, "weights.download_host", "did you mean 'worker'"),
        ({}, {"model": "/DeepSeek"}, "runtime.model", "at least two levels deep"),
        ({"drafter": {"repo": "a/b", "revision": "main"}}, {"speculative": None}, "weights.drafter", "drafter_host"),
        ({"directory": "/srv/models/x"}, {}, "weights.directory", "not both"),
        ({"repo": None, "revision": None}, {}, "weights.repo", "set repo (with revision)"),
        ({"revision": None}, {}, "weights.revision", "is needed with repo"),
        ({"repo": None, "directory": "/srv/models/x"}, {}, "weights.revision", "SHA256SUMS names the files"),
    ],
)
def test_bad_weights_inventories_name_the_field(weights, runtime, field, words):
    doc = lab_doc(**weights)
    doc["weights"] = {k: v for k, v in doc["weights"].items() if v is not None}
    doc["runtime"] = {k: v for k, v in {**doc["runtime"], **runtime}.items() if v is not None}
    problems = check_inventory(Inventory.model_validate(copy.deepcopy(doc)))
    assert any(".".join(map(str, p.path)) == field and words in p.message for p in problems), problems


def test_without_a_weights_section_an_empty_folder_fails_preflight_and_a_hub_snapshot_of_links_passes():
    doc = lab_doc()
    doc.pop("weights")
    inv = Inventory.model_validate(doc)
    empty = {"head": host_facts(inv, "head", weights__0=sec(folder(files={}, present=True)))}
    links = {"head": host_facts(inv, "head", weights__0=sec(folder(files={}, links="config.json -> ../../blobs/ab12\n")))}
    check = REGISTRY["weights.present"]
    (bad,) = check.run(Context(inventory=inv, hosts=["head"], facts=empty))
    assert bad.status == "failed" and "is empty" in bad.message and "weights" in bad.fix
    (good,) = check.run(Context(inventory=inv, hosts=["head"], facts=links))
    assert good.status == "ok"  # vLLM loads through a hub cache's snapshot links


def test_a_copy_to_a_node_without_rsync_is_refused_naming_it_before_a_byte_moves():
    p = plans(worker=folder(files={}, present=False), worker_hashes="", worker_tools="/usr/bin/iperf3\n")
    assert "rsync is missing on worker" in p["worker"].blocked and "host.tools" in p["worker"].blocked
    assert p["head"].empty  # the head's own copy is verified: nothing to refuse there


# --- a folder source (weights.directory): a checkpoint already on the head, listed by its SHA256SUMS ---

DIR = "/srv/models/lab-checkpoint"
SUMS = "".join(f"{sha(n)}  {n}\n" for n in FILES)  # `sha256sum` output
FOLDER = {n: ManifestFile(s, sha256=sha(n)) for n, s in FILES.items()}  # every file by its sha256


def folder_inventory(directory: str = DIR) -> Inventory:
    doc = lab_doc()
    doc["weights"] = {"directory": directory}
    return Inventory.model_validate(doc)


def source(files=FILES, sums: str = SUMS) -> str:
    """The `weights_source` probe's output: the folder's files, then its SHA256SUMS."""
    return "@@dir\npresent\n" + "".join(f"{s} {n}\n" for n, s in files.items()) + f"@@sums\n{sums}"


def folder_record() -> str:
    return WeightsRecord(f"head:{DIR}", "SHA256SUMS", hashlib.sha256(SUMS.encode()).hexdigest(), FOLDER).to_json()


def test_a_folder_source_is_copied_into_place_on_its_host_then_over_the_fabric_to_the_others():
    inv = folder_inventory()
    p = plans(inv, head=folder(files={}, present=False), head_hashes="", worker=folder(files={}, present=False),
              worker_hashes="", head_source=source())  # fmt: skip
    (place,) = p["head"].changes
    assert place.action == "place" and place.data["directory"] == DIR and place.data["files"] == sorted(FILES)
    assert f"from {DIR} into {staging_path(MODEL)}" in place.summary and f"head:{DIR}@" in place.summary
    (copy_,) = p["worker"].changes
    assert copy_.action == "copy" and copy_.data["from_address"] == "10.231.100.2"
    # placed and recorded everywhere: nothing to do, and the folder's digest names the version
    placed = folder(files=FILES, rec=folder_record())
    p = plans(inv, head=placed, worker=placed, head_hashes=unchanged(), worker_hashes=unchanged(), head_source=source())
    assert p["head"].empty and p["worker"].empty and f"head:{DIR}@" in p["worker"].reason


def test_a_folder_without_sha256sums_or_with_a_listed_file_gone_is_refused_with_the_fix():
    inv = folder_inventory()
    p = plans(inv, head=folder(files={}, present=False), head_hashes="", head_source=source(sums=""))
    assert "has no SHA256SUMS" in p["head"].blocked and "xargs -0 sha256sum > SHA256SUMS" in p["head"].blocked
    assert p["worker"].blocked == p["head"].blocked  # nothing moves anywhere
    gone = {n: s for n, s in FILES.items() if n != "config.json"}
    p = plans(inv, head=folder(files={}, present=False), head_hashes="", head_source=source(files=gone))
    assert "names 1 file(s) the folder does not hold: config.json" in p["head"].blocked


def test_a_folder_source_at_the_model_path_is_verified_in_place_and_never_spread_when_corrupt():
    inv = folder_inventory(MODEL)
    shard = "model-00003-of-00003.safetensors"
    hashes = unchanged({n: s for n, s in FILES.items() if n != shard}) + f"s {'0' * 64} {shard}\n"
    p = plans(inv, head=folder(files=FILES, rec=folder_record()), head_hashes=hashes, head_source=source())
    assert "do not match its SHA256SUMS" in p["head"].blocked and shard in p["head"].blocked
    # the files match and nothing recorded them yet: recorded in place, no copy
    p = plans(inv, head=folder(files=FILES), head_hashes="".join(f"s {sha(n)} {n}\n" for n in FILES), head_source=source())
    assert [c.action for c in p["head"].changes] == ["record"]


def test_files_verified_under_the_hubs_git_digest_are_hashed_again_for_a_folders_sha256sums_not_fetched():
    inv = folder_inventory(MODEL)  # the hub's copy, now named as a folder source in place
    p = plans(inv, head=folder(files=FILES, rec=record()), head_hashes=unchanged(), head_source=source())
    (c,) = p["head"].changes
    assert c.action == "verify" and c.data["files"] == sorted(SMALL) and "under another digest" in c.summary


# --- a change of revision at the same runtime.model: built beside the serving copy, the old kept for a rollback ---

COMMIT2 = "beef" + "0" * 36
SHARD3 = "model-00003-of-00003.safetensors"
# the later revision rewrites shard 3 (other bytes, same size) and config.json
MANIFEST2 = {**MANIFEST, SHARD3: ManifestFile(1003, sha256=sha("v2 " + SHARD3)), "config.json": ManifestFile(121, git=blob("v2"))}
FILES2 = {**FILES, "config.json": 121}
KEPT = "/models/.DeepSeek-V4.1-Flash-1017.sparkctl-previous"


def record2() -> str:
    return WeightsRecord(REPO, COMMIT2, COMMIT2, dict(MANIFEST2)).to_json()


def kept(files=FILES, rec: str = "", stat=None) -> str:
    """The `weights` probe's part on the previous version kept beside the path: listing, record, stat record."""
    line = "{size} 1733390000.0000000000 {name}\n".format
    listing = "".join(line(size=s, name=n) for n, s in files.items())
    stat = listing if stat is None else "".join(line(size=s, name=n) for n, s in stat.items())
    return f"@@previous\n{listing}@@previous_record\n{rec}@@previous_stat\n{stat}"


def with_kept(probe: str, previous: str) -> str:
    return probe.replace("@@free\n", previous + "@@free\n")


def test_a_new_revision_is_built_beside_the_serving_copy_which_moves_aside_whole_for_a_rollback():
    inv = Inventory.model_validate(lab_doc(revision=COMMIT2))
    # the worker already holds the new revision (its record is the manifest: no hub); the head the old one
    p = plans(inv, worker=folder(files=FILES2, rec=record2()))
    (c,) = p["head"].changes
    assert c.action == "download" and c.data["files"] == ["config.json", SHARD3]  # what changed, alone
    assert c.data["bytes"] == 121 + 1003 and not c.data["replace"]
    rotate = c.data["rotate"]
    assert rotate["keep"] == sorted(n for n in FILES if n.endswith(".safetensors") and n != SHARD3)
    assert rotate["old"] == f"{REPO}@{COMMIT[:12]}" and rotate["trusted"] == sorted(FILES)
    assert f"move the current {REPO}@{COMMIT[:12]} aside to {KEPT} (kept whole: a rollback needs no download)" in c.summary
    assert p["worker"].empty


def test_a_rollback_puts_the_kept_version_back_with_links_and_fetches_nothing():
    # the head serves revision 2; revision 1 was kept beside it; the inventory goes back to revision 1
    head = with_kept(folder(files=FILES2, rec=record2()), kept(rec=record()))
    p = plans(INV, head=head, worker=with_kept(folder(files=FILES2, rec=record2()), kept(rec=record())))
    for host in ("head", "worker"):
        (c,) = p[host].changes
        assert c.action == "restore" and c.data["files"] == [] and c.data["bytes"] == 0, c
        assert c.data["rotate"]["reuse"] == ["config.json", SHARD3] and len(c.data["rotate"]["keep"]) == 2
        assert f"back from {KEPT}" in c.summary and "nothing fetched" in c.summary
    # a kept file written since it was verified (its ctime moved) is fetched again, alone
    moved = kept(rec=record(), stat={n: s for n, s in FILES.items() if n != SHARD3})
    (c,) = plans(INV, head=with_kept(folder(files=FILES2, rec=record2()), moved))["head"].changes
    assert c.action == "download" and c.data["files"] == [SHARD3] and c.data["rotate"]["reuse"] == ["config.json"]
    # a disk too small for it names the kept version as what can be freed, and removes nothing itself
    tight = folder(files=FILES2, rec=record2(), free=1000).replace("@@free", moved + "@@free", 1)
    blocked = plans(INV, head=tight)["head"].blocked
    assert "needs 0.00 GB more" in blocked and f"{REPO}@{COMMIT[:12]}, holds 0.00 GB in {KEPT}: remove it there" in blocked


def test_the_rotation_on_real_files_keeps_both_versions_whole_and_the_probe_trusts_the_kept_one(tmp_path):
    import subprocess

    from sparkctl.facts.weights import previous_path, stat_command, weights_probe
    from sparkctl.steps.weights import rotate_script

    def sh(script: str, stdin: str = "") -> str:
        r = subprocess.run(["sh", "-c", script], input=stdin, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    path = tmp_path / "models" / "ckpt"
    (path / "sub").mkdir(parents=True)
    for name, text in (("a.safetensors", "shared"), ("sub/b.json", "old b"), ("c.json", "old c")):
        (path / name).write_text(text)
    sh(stat_command(str(path)))
    staging = tmp_path / "models" / ".ckpt.sparkctl-staging"
    staging.mkdir()
    (staging / "c.json").write_text("new c")  # the fetched file, verified
    (staging / ".cache").mkdir()  # the hub client's resume metadata
    rotate = {"keep": ["a.safetensors"], "reuse": [], "trusted": ["a.safetensors", "sub/b.json"], "old": "x"}
    sh(rotate_script(str(path), rotate))
    sh(stat_command(previous_path(str(path)), only_stdin=True), "".join(n + "\n" for n in rotate["trusted"]))
    assert sorted(p.name for p in path.rglob("*")) == ["a.safetensors", "c.json"] and (path / "c.json").read_text() == "new c"
    assert not staging.exists()
    copy = parse_weights(str(path), sh(weights_probe(str(path))))
    assert copy.files == {"a.safetensors": 6, "c.json": 5}
    # the old version whole beside it; only the files it had verified are vouched for
    assert copy.previous is not None and copy.previous.files == {"a.safetensors": 6, "sub/b.json": 5, "c.json": 5}
    assert copy.previous.unchanged == {"a.safetensors", "sub/b.json"}


def test_a_new_revision_at_the_same_path_restarts_the_engine_and_nothing_else():
    # the files under the same mount change: only a restart loads them (the launch is otherwise the same)
    from sparkctl.launch.plan import render

    before, after = render(INV), render(Inventory.model_validate(lab_doc(revision=COMMIT2)))
    assert before.group_hashes["engine"] != after.group_hashes["engine"]
    assert {g: h for g, h in before.group_hashes.items() if g != "engine"} == {
        g: h for g, h in after.group_hashes.items() if g != "engine"
    }
    assert [c.mounts for c in before.containers] == [c.mounts for c in after.containers]


def test_files_verified_under_another_digest_beside_files_to_fetch_are_fetched_too_not_taken_as_verified():
    # the head holds the folder source's version (sha256 of every file), one shard gone; the
    # inventory names the hub again, whose manifest lists config.json by its git blob id
    gone = {n: s for n, s in FILES.items() if n != SHARD3}
    head = folder(files=gone, rec=folder_record())
    (c,) = plans(INV, head=head, head_hashes=unchanged(gone))["head"].changes
    assert c.action == "download" and c.data["files"] == ["config.json", SHARD3], c.data["files"]
    assert c.data["rotate"]["old"].startswith(f"head:{DIR}@")  # the folder's version moves aside whole
