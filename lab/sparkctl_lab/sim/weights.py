"""What vLLM 0.33 checks of a local model directory before and while it loads the weights, with its
messages (SIM_CHECK_MODEL_PATH=1; startup.py runs these on every rank's own node).

config (transformers_utils/config.py get_config): no config.json -> ValueError "Invalid repository ID
or local directory specified: ...". weights (model_loader/default_loader.py _prepare_weights and
weight_utils.py): `*.safetensors` in the folder (none: RuntimeError "Cannot find any model
weights"; a consolidated*.safetensors anywhere below it makes it Mistral's format, whose files are
the folder's own consolidated*.safetensors); with model.safetensors.index.json, every file its
weight_map names must be there (filter_duplicate_safetensors_files: FileNotFoundError); then each
file, in natural sort order, is opened by safetensors' safe_open, whose header check (safetensors
0.8 SafeTensors::read_metadata) refuses a short, corrupt or truncated file:
"safetensors_rust.SafetensorError: Error while deserializing header: ...". Like vLLM, only headers
and sizes are read, never the data.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re

MAX_HEADER_SIZE = 100_000_000
# safetensors' Dtype and its bits per element (tensor.rs Dtype::bitsize), in its declaration order
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
INDEX = "model.safetensors.index.json"
MISTRAL_INDEX = "consolidated.safetensors.index.json"
SAFETENSORS_ERROR = "safetensors_rust.SafetensorError: Error while deserializing header: "


class WeightsError(Exception):
    """vLLM's exception line (str), and how far loading got: `loaded` files of `total`."""

    def __init__(self, line: str, loaded: int = 0, total: int = 0, where: str = ""):
        super().__init__(line)
        self.line, self.loaded, self.total, self.where = line, loaded, total, where


def config_error(model: str) -> str | None:
    """get_config()'s refusal of a local folder without config.json (None: it has one)."""
    if os.path.isfile(os.path.join(model, "config.json")):
        return None
    return (
        "ValueError: Invalid repository ID or local directory specified:"
        f" '{model}'.\nPlease verify the following requirements:\n"
        "1. Provide a valid Hugging Face repository ID.\n"
        "2. Specify a local directory that contains a recognized configuration file.\n"
        "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
        "   - For Mistral models: ensure the presence of a 'params.json'.\n"
    )


def _natural_key(path: str) -> list:
    # weight_utils.py _natural_sort_key: digit runs compare as numbers
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def _mistral(model: str) -> bool:
    """load_format auto: a consolidated*.safetensors anywhere below the folder (repo_utils.py
    list_repo_files rglobs a local folder, matching base names) makes it Mistral's format."""
    return any(fnmatch.fnmatch(f, "consolidated*.safetensors") for _, _, files in os.walk(model) for f in files)


def weight_files(model: str) -> list[str]:
    """The safetensors files vLLM loads from a local folder, in load order ([] for a folder of .bin
    files, which it loads unchecked here); raises WeightsError as vLLM would."""
    pattern, index_name = ("consolidated*.safetensors", MISTRAL_INDEX) if _mistral(model) else ("*.safetensors", INDEX)
    files = glob.glob(os.path.join(model, pattern))
    if not files:
        if pattern == "*.safetensors" and glob.glob(os.path.join(model, "*.bin")):
            return []
        raise WeightsError(f"RuntimeError: Cannot find any model weights with `{model}`", where="prepare")
    index = os.path.join(model, index_name)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except json.JSONDecodeError as e:
            raise WeightsError(f"json.decoder.JSONDecodeError: {e}", where="prepare") from None
        except KeyError:
            raise WeightsError("KeyError: 'weight_map'", where="prepare") from None
        named = {os.path.join(model, name) for name in weight_map.values()}
        missing = named - set(files)
        if missing:
            listed = ", ".join(repr(p) for p in sorted(missing))
            raise WeightsError(f"FileNotFoundError: Weight files referenced in index but missing: {{{listed}}}", where="prepare")
        files = [f for f in files if f in named]
    return sorted(files, key=_natural_key)


def _eof(text: str) -> str:
    """serde_json's error for JSON cut short: what it was inside of, at the end of the text."""
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    if in_string:
        what = "a string"
    elif text.rstrip()[-1:] in (",", ":", ""):
        what = "a value"
    else:
        what = {"{": "an object", "[": "a list"}.get(stack[-1] if stack else "", "a value")
    lines = text.split("\n")
    return f"EOF while parsing {what} at line {len(lines)} column {len(lines[-1])}"


def _serde_message(e: json.JSONDecodeError) -> str:
    """serde_json's wording for what Python's json module reports (safetensors parses with serde_json)."""
    at = f" at line {e.lineno} column {e.colno}"
    msg = e.msg
    if e.pos >= len(e.doc.rstrip()) or msg.startswith("Unterminated string"):
        return _eof(e.doc)
    if msg.startswith("Expecting property name"):
        return "key must be a string" + at
    if msg.startswith("Extra data"):
        return "trailing characters" + at
    if msg.startswith("Expecting ':'"):
        return "expected `:`" + at
    if msg.startswith("Expecting ','"):
        return "expected `,` or `}`" + at
    if msg.startswith("Invalid control character"):
        return "control character (\\u0000-\\u001F) found while parsing a string" + at
    return "expected value" + at


def header_error(path: str) -> str | None:
    """safetensors' read_metadata() on the file: its message (None: the header is sound and the
    data it declares exactly fills the file)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "header too small"
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER_SIZE:
            return "header too large"
        if 8 + n > size:
            return "invalid header length"
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data":
            return f"invalid UTF-8 in header: incomplete utf-8 byte sequence from index {e.start}"
        return f"invalid UTF-8 in header: invalid utf-8 sequence of {e.end - e.start} bytes from index {e.start}"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return "invalid JSON in header: " + _serde_message(e)
    if not isinstance(doc, dict):
        token = text.strip()
        kind = "sequence" if isinstance(doc, list) else "null" if doc is None else None
        if kind is None:  # a scalar: serde names it with its value, at its end
            name = {str: "string", bool: "boolean", int: "integer", float: "floating point"}[type(doc)]
            kind = f"{name} {token}" if isinstance(doc, str) else f"{name} `{token}`"
        where = 0 if isinstance(doc, list) else len(token)
        return f"invalid JSON in header: invalid type: {kind}, expected struct HashMetadata at line 1 column {where}"
    tensors = []
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        # the tensors are a flattened map: serde reports their errors at the end of the header
        for key in ("dtype", "shape", "data_offsets"):
            if not isinstance(info, dict) or key not in info:
                return f"invalid JSON in header: missing field `{key}` at line 1 column {len(text.rstrip())}"
        if info["dtype"] not in DTYPE_BITS:
            known = ", ".join(f"`{d}`" for d in DTYPE_BITS)
            return (
                f"invalid JSON in header: unknown variant `{info['dtype']}`, expected one of {known}"
                f" at line 1 column {len(text.rstrip())}"
            )
        tensors.append((name, info))
    # Metadata::validate: offsets contiguous from 0 (sorted by offsets), each the size shape x dtype says
    tensors.sort(key=lambda t: tuple(t[1]["data_offsets"]))
    end = 0
    for name, info in tensors:
        s, e = info["data_offsets"]
        if s != end or e < s:
            return f"invalid offset for tensor `{name}`"
        end = e
        count = 1
        for d in info["shape"]:
            count *= d
        bits = count * DTYPE_BITS[info["dtype"]]
        if bits % 8:
            return "The slice is slicing for subbytes dtypes, and the slice does not end up at a byte boundary, this is invalid."
        if e - s != bits // 8:
            return "invalid shape, data type, or offset for tensor"
    if end + 8 + n != size:
        return "incomplete metadata, file not fully covered"
    return None


def check(model: str) -> WeightsError | None:
    """Everything vLLM would refuse while loading the weights of `model` (None: it would load)."""
    try:
        files = weight_files(model)
    except WeightsError as e:
        return e
    for i, path in enumerate(files):
        msg = header_error(path)
        if msg is not None:
            return WeightsError(SAFETENSORS_ERROR + msg, loaded=i, total=len(files), where="open")
    return None


def report(models: list[str]) -> dict:
    """check() over the models a rank loads (the target, then a local drafter), as a node answers the
    driver: {"shards": files of the first model, "error": None | {"line", "loaded", "total", "where", "model"}}."""
    out: dict = {"shards": 0, "error": None}
    for i, model in enumerate(models):
        err = check(model)
        if i == 0:
            try:
                out["shards"] = len(weight_files(model))
            except WeightsError:
                pass
        if err is not None:
            out["error"] = {"line": err.line, "loaded": err.loaded, "total": err.total, "where": err.where, "model": model}
            break
    return out
