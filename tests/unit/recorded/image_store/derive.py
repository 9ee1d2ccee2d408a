"""Derive containerd-store `docker image inspect` samples of the image in classic-inspect.json:

    python tests/unit/recorded/image_store/derive.py

The lab's engine is Debian's 20.10 (classic store only), and no public post carries a whole
containerd-store inspect of an image whose classic inspect is also public, so these are derived
from moby's source (github.com/moby/moby at b985e231, 2026-08), field by field:
- daemon/containerd/image_inspect.go: `Id` and `Descriptor` are the image's target (the manifest it
  was pulled by; for a multi-platform tag, the index), RepoDigests = name@target digest, Config is
  the config blob's DockerOCIImageConfig (ocispec field tags: empty fields left out), RootFS.Layers
  the config's diff IDs, Comment the last history entry's, no Container/ContainerConfig/DockerVersion;
- API >= 1.52 (Docker 29) leaves GraphDriver out; older APIs get {"Name": <snapshotter>} (GraphDriverLegacy);
  `Descriptor` is there since API 1.48 (moby PR #48894, whose alpine sample shows Id == the index digest);
  APIs < 1.50 fill Config with the legacy fields (daemon/server/router/image/inspect_response.go: null
  Entrypoint, empty User and Hostname, ...) and < 1.52 always carry Parent, Comment, DockerVersion, Author
  (image_routes.go);
- the target digest is the registry's manifest digest for this tag (registry-lab.json); Size and
  LastTagTime are illustrative (content + unpacked snapshot, the time of the pull).
Real posts that show the same shape in part: docker/cli#5526 (Docker 26.1, Id = digest),
DataBiosphere/azul#6656 (Id == the RepoDigest's digest), moby/moby#48401.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OCI_CONFIG = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels", "StopSignal")
LEGACY_V149 = {
    "AttachStderr": False,
    "AttachStdin": False,
    "AttachStdout": False,
    "Cmd": None,
    "Domainname": "",
    "Entrypoint": None,
    "Env": None,
    "Hostname": "",
    "Image": "",
    "Labels": None,
    "OnBuild": None,
    "OpenStdin": False,
    "StdinOnce": False,
    "Tty": False,
    "User": "",
    "Volumes": None,
    "WorkingDir": "",
}


def containerd_doc(classic: dict, manifest_digest: str, manifest_size: int, media_type: str, api_52: bool) -> dict:
    name = classic["RepoTags"][0].rpartition(":")[0]
    doc = {
        "Id": manifest_digest,
        "RepoTags": classic["RepoTags"],
        "RepoDigests": [f"{name}@{manifest_digest}"],
        "Parent": "",
        "Comment": classic["Comment"],
        "Created": classic["Created"],
        "Config": {k: v for k, v in classic["Config"].items() if k in OCI_CONFIG and v},
        "Architecture": classic["Architecture"],
        "Os": classic["Os"],
        "Size": classic["Size"] + 18952007,  # illustrative: the compressed layer kept beside the snapshot
    }
    if not api_52:  # API 1.45: the legacy Config fields and the always-present metadata fields
        doc["Config"] = {**LEGACY_V149, **doc["Config"]}
        doc.update({"DockerVersion": "", "Author": ""})
        doc["GraphDriver"] = {"Data": None, "Name": "overlayfs"}
    doc["RootFS"] = classic["RootFS"]
    doc["Metadata"] = {"LastTagTime": "2026-12-01T13:40:02.118250187Z"}
    if api_52:
        doc["Descriptor"] = {"mediaType": media_type, "digest": manifest_digest, "size": manifest_size}
    return doc


def main() -> None:
    classic = json.loads(json.loads((HERE / "classic-inspect.json").read_text())["out"])[0]
    reg = json.loads((HERE.parent / "image_transport" / "registry-lab.json").read_text())
    got = next(e for e in reg["exchanges"] if e["method"] == "GET" and "/manifests/0.1" in e["url"])
    digest, size, media = (
        got["headers"]["docker-content-digest"],
        int(got["headers"]["content-length"]),
        got["headers"]["content-type"],
    )
    for name, api_52, engine in (
        ("containerd-inspect-docker29.json", True, "Docker 29 (API 1.52), containerd image store"),
        ("containerd-inspect-docker26.json", False, "Docker 26.1 (API 1.45), containerd snapshotter"),
    ):
        doc = containerd_doc(classic, digest, size, media, api_52)
        (HERE / name).write_text(
            json.dumps(
                {
                    "source": f"derived from moby's source (derive.py: which fields and why) for {engine}: the image of "
                    "classic-inspect.json pulled by tag from the lab registry; not recorded output",
                    "rc": 0,
                    "out": json.dumps([doc], indent=4) + "\n",
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
