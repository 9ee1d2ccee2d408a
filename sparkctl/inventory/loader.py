"""Read an inventory file into a validated `Inventory`, or fail with every problem named (exit 2).

Order matters for hostile input: the size is checked before reading, the bytes before decoding,
the text before parsing, the YAML graph before constructing anything (`safe_yaml`), and only
then do the models and the cross-field rules (`validate`) run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sparkctl.errors import InputError
from sparkctl.inventory.examples import START_HINT
from sparkctl.inventory.models import Inventory
from sparkctl.inventory.problems import InventoryError, Problem, from_validation_error
from sparkctl.inventory.validate import check_inventory
from sparkctl.transport.redact import remember_env

MAX_BYTES = 1024 * 1024  # an inventory is a few KiB


def _fail(path: Path, message: str, line: int | None = None, column: int | None = None, fix: str | None = None):
    raise InventoryError(path, [Problem((), message, line=line, column=column)], fix=fix)


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _refuse_special(path: Path, mode: int) -> None:
    """Only a regular file is an inventory: reading a FIFO or a device could block forever or never end."""
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise InputError(
        f"{path} is {kind}, not an inventory file (only a regular file is read)",
        fix="name the YAML file itself, e.g. my-cluster.yaml (write a pipe's content to a file first)",
    )


def _unreadable(path: Path, err: OSError) -> InputError:
    return InputError(f"cannot read inventory file {path}: {err.strerror}", fix="check the path and its permissions")


def read_text(path: Path) -> str:
    """The file's text, refusing missing, special (FIFO, device, directory), oversized, binary and
    non-UTF-8 files before parsing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(
            f"inventory file {path} does not exist",
            fix=f"check the path, or {START_HINT}",
        ) from None
    except OSError as err:
        raise _unreadable(path, err) from None
    if not stat.S_ISREG(st.st_mode):
        _refuse_special(path, st.st_mode)
    too_big = f"is larger than {MAX_BYTES // 1024} KiB; an inventory is a few KiB of YAML"
    if st.st_size > MAX_BYTES:
        _fail(path, f"{too_big} ({st.st_size} bytes)", fix="name the inventory YAML file, not something else")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it cannot hang;
        # fstat then judges what was really opened.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise _unreadable(path, err) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            _refuse_special(path, mode)
        try:
            raw = f.read(MAX_BYTES + 1)  # bounded even if the file grows while being read
        except OSError as err:
            raise _unreadable(path, err) from None
    if len(raw) > MAX_BYTES:
        _fail(path, too_big, fix="name the inventory YAML file, not something else")
    if b"\x00" in raw:
        at = raw.index(b"\x00")
        _fail(
            path,
            f"is binary (NUL byte at offset {at}), not YAML text",
            line=raw.count(b"\n", 0, at) + 1,
            fix="name the inventory YAML file, not something else",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        _fail(
            path,
            f"is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})",
            line=raw.count(b"\n", 0, err.start) + 1,
            fix="save the file as UTF-8",
        )
    return text.removeprefix("\ufeff")


# A fleet file's own sections (fleet/model.py FleetFile), which no inventory has
FLEET_KEYS = ("fleet", "members", "front_door")


def load_inventory_report(path: Path | str, *, control_machine: bool = False) -> tuple[Inventory, list[Problem]]:
    """The validated inventory and its warnings (located). Raises InventoryError/InputError (exit 2).

    control_machine: also check this machine's key files and known_hosts for every host
    (inventory/control.py), as every command that opens SSH does before touching a host."""
    from pydantic import ValidationError

    from sparkctl.inventory.safe_yaml import YamlProblem, parse

    path = Path(path)
    text = read_text(path)
    try:
        data, locations = parse(text)
    except YamlProblem as err:
        _fail(
            path,
            err.message,
            line=err.line,
            column=err.column,
            fix="edit the file at the line shown; an inventory is plain YAML: mappings, lists, text and numbers",
        )
    if data is None:
        _fail(path, "is empty; an inventory needs at least cluster, hosts and runtime", fix=START_HINT)
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({data!r:.40})"
        _fail(path, f"the top level must be a mapping (cluster:, hosts:, runtime:, ...), got {kind}", line=1, fix=START_HINT)
    if "hosts" not in data and any(key in data for key in FLEET_KEYS):
        raise InputError(
            f"{path} is a fleet file (fleet:, members:, front_door:), not one cluster's inventory",
            fix=f"this is a fleet file: use `sparkctl fleet ... -f {path}` (e.g. sparkctl fleet status -f {path}); "
            "-i takes the inventory of one cluster (a file its members: list names)",
        )

    try:
        inv = Inventory.model_validate(data)
    except ValidationError as err:
        problems = [p.located(locations) for p in from_validation_error(err, Inventory)]
        raise InventoryError(path, problems) from None

    found = [p.located(locations) for p in check_inventory(inv)]
    if errors := [p for p in found if p.severity == "error"]:
        raise InventoryError(path, errors)
    inv._source = path
    if control_machine:
        from sparkctl.inventory.control import FIX, check_control_machine

        if mistakes := [p.located(locations) for p in check_control_machine(inv)]:
            raise InventoryError(path, mistakes, fix=FIX, verdict="cannot be used from this machine")
    # From here on every output of this process masks the inventory's secrets (transport/redact.py).
    remember_env(inv.runtime.env, inv.runtime.secret_env)
    return inv, [p for p in found if p.severity == "warning"]


def load_inventory(path: Path | str, *, control_machine: bool = False) -> Inventory:
    """Load and validate an inventory file; every mistake becomes an InputError (exit 2) naming file and field."""
    return load_inventory_report(path, control_machine=control_machine)[0]
