"""Runs on the source node: a `docker save` tar on stdin, the same tar minus the layers the
destination already holds on stdout. Standard library only (it is sent as `python3 -c`).

    docker save <image id> | python3 -c "$(this file)" '{"chains": [...], "diffs": [...]}' | ... docker load

`docker load` skips every layer whose chain ID its layer store already holds without opening
its file (moby image/tarexport/load.go), so a tar without those files loads the same image.

Which entries are layers the destination holds, proven from the stream itself:
- legacy format (dockerd < 25): layer directories are named by v1 IDs, the digest of the
  layer's v1 JSON with its chain ID and parent v1 ID (moby image/v1.CreateID). The directory's
  own `json` precedes its `layer.tar`, so the filter recomputes the name for each held chain ID
  and drops the layer only when one reproduces the directory name exactly. A layer it cannot
  prove held is sent: a wrong guess costs bytes, never correctness.
- OCI layout (dockerd >= 25): layers are `blobs/sha256/<diff ID>`.

stderr: `sparkctl-filter progress <bytes out>` about twice a second, and at the end
`sparkctl-filter done <JSON counts>`. A closed stderr (sparkctl went away) ends the filter, so
an interrupted transfer stops the whole pipeline instead of finishing unseen.
"""

import hashlib
import json
import re
import sys
import tarfile
import time

BLOCK = 512
CHUNK = 1 << 20
PREFIX = "sparkctl-filter"
PROGRESS_EVERY = 0.5  # seconds between progress lines
LEGACY_JSON = re.compile(r"^([0-9a-f]{64})/json$")
LEGACY_LAYER = re.compile(r"^([0-9a-f]{64})/layer\.tar$")
OCI_BLOB = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")


def go_json(value):
    """Compact JSON as Go's encoding/json writes it (HTML-safe escapes, UTF-8 kept)."""
    s = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(ch, esc)
    return s


def v1_ids(doc, chain_id):
    """The legacy directory names a layer with this v1 JSON and chain ID can have.

    CreateID hashes the v1 image with id cleared, parent and layer_id set, top-level keys
    sorted (a Go map); `os` is set after hashing on all but the top layer, so both are tried."""
    fields = dict((k, v) for k, v in doc.items() if k not in ("id", "parent"))
    fields["layer_id"] = chain_id
    if doc.get("parent"):
        fields["parent"] = "sha256:" + doc["parent"]
    variants = [fields]
    if "os" in fields:
        variants.append(dict((k, v) for k, v in fields.items() if k != "os"))
    # top-level keys sorted; nested objects keep their order (Go structs, written in field order)
    return [hashlib.sha256(go_json(dict(sorted(m.items()))).encode("utf-8")).hexdigest() for m in variants]


def padded(size):
    """Bytes an entry of `size` takes in the tar (whole blocks)."""
    return (size + BLOCK - 1) // BLOCK * BLOCK


def pax_path(data):
    """The `path` record of a pax extended header, if any."""
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        if key == b"path":
            return value.decode("utf-8", "surrogateescape")
        pos += length
    return None


class Filter(object):
    def __init__(self, held_chains, held_diffs, out, err):
        self.held_chains = list(held_chains)
        self.held_diffs = set(d.split(":")[-1] for d in held_diffs)
        self.out, self.err = out, err
        self.drop_dirs = set()
        self.stats = {"bytes_in": 0, "bytes_out": 0, "layers_sent": 0, "layers_skipped": 0, "bytes_skipped": 0}
        self.last_report = time.monotonic()

    def report(self, force=False):
        now = time.monotonic()
        if force or now - self.last_report >= PROGRESS_EVERY:
            self.last_report = now
            self.err.write("%s progress %d\n" % (PREFIX, self.stats["bytes_out"]))
            self.err.flush()

    def write(self, data):
        self.out.write(data)
        self.stats["bytes_out"] += len(data)
        self.report()

    def read(self, inp, n):
        data = inp.read(n)
        if len(data) != n:
            raise EOFError("docker save ended in the middle of an entry (%d of %d bytes)" % (len(data), n))
        self.stats["bytes_in"] += n
        return data

    def copy(self, inp, n, keep=True):
        """Move the next `n` bytes of the input to the output (or drop them: `keep` false)."""
        while n:
            data = self.read(inp, min(n, CHUNK))
            if keep:
                self.write(data)
            n -= len(data)

    def held_layer(self, name):
        m = LEGACY_LAYER.match(name)
        if m:
            return m.group(1) in self.drop_dirs
        m = OCI_BLOB.match(name)
        return bool(m) and m.group(1) in self.held_diffs

    def learn(self, name, data):
        """A legacy layer's v1 JSON: does its directory name prove a layer the destination holds?"""
        m = LEGACY_JSON.match(name)
        if not m or not self.held_chains:
            return
        try:
            doc = json.loads(data.decode("utf-8"))
        except ValueError:
            return
        for chain in self.held_chains:
            if m.group(1) in v1_ids(doc, chain):
                self.drop_dirs.add(m.group(1))
                return

    def run(self, inp):
        pending = b""  # pax / GNU long-name headers that belong to the next entry
        long_name = None
        while True:
            block = inp.read(BLOCK)
            if not block:
                break
            if len(block) < BLOCK:
                raise EOFError("docker save ended inside a tar header")
            self.stats["bytes_in"] += BLOCK
            if block == b"\0" * BLOCK:  # end of archive: the rest is padding
                self.write(pending + block)
                pending = b""
                while True:
                    rest = inp.read(CHUNK)
                    if not rest:
                        break
                    self.stats["bytes_in"] += len(rest)
                    self.write(rest)
                break
            # name (with a ustar prefix), size (octal or GNU base-256) and type, as tarfile reads them
            h = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            if h.type in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME):
                data = self.read(inp, padded(h.size))
                pending += block + data
                if h.type == tarfile.XHDTYPE:
                    long_name = pax_path(data[: h.size])
                else:  # a GNU long name: the entry's data is the next entry's name
                    long_name = data[: h.size].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                continue
            name = long_name or h.name
            long_name = None
            if h.isreg() and self.held_layer(name):
                self.copy(inp, padded(h.size), keep=False)
                self.stats["layers_skipped"] += 1
                self.stats["bytes_skipped"] += h.size
                pending = b""
                continue
            if h.isreg() and (LEGACY_LAYER.match(name) or OCI_BLOB.match(name)) and h.size > 0:
                self.stats["layers_sent"] += 1  # (OCI: config and manifests count too, they are small)
            if LEGACY_JSON.match(name) and h.size < (4 << 20):
                data = self.read(inp, padded(h.size))
                self.learn(name, data[: h.size])
                self.write(pending + block + data)
            else:
                self.write(pending + block)
                self.copy(inp, padded(h.size))
            pending = b""
        self.out.flush()
        self.report(force=True)
        return self.stats


def main(argv):
    want = json.loads(argv[1]) if len(argv) > 1 else {}
    f = Filter(want.get("chains", []), want.get("diffs", []), sys.stdout.buffer, sys.stderr)
    try:
        stats = f.run(sys.stdin.buffer)
    except BrokenPipeError:
        return 141
    except (EOFError, tarfile.HeaderError) as exc:
        sys.stderr.write("%s error %s\n" % (PREFIX, exc))
        return 1
    sys.stderr.write("%s done %s\n" % (PREFIX, json.dumps(stats)))
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
