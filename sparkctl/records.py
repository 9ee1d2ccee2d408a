"""The records sparkctl keeps on the head (the files state.py names), declared once: the writer
builds one of these models and dumps it, the facts (facts/state.py, facts/keeper.py) read it back
into the same model, so a check or a step that reads `f.applied.config_hash` is checked by mypy.

A record on the head may have been written by an older or a newer sparkctl: the reader is tolerant
(unknown keys are ignored, a missing key takes its default). What cannot be read as the record (not
JSON, a value of the wrong kind) is a `RecordError` naming the file, which the fact keeps as its
error (`f.errors`): a clear message, never a traceback.

The inventory and the launch are kept as their owners dumped them (a record an older sparkctl wrote
may not fit today's models): `restore_secrets` and the keeper re-read what they need of them.
"""

from __future__ import annotations

import json
from typing import Any, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from sparkctl.errors import SparkctlError


class Record(BaseModel):
    """A record as the head keeps it: unknown keys ignored, missing ones defaulted (a null where
    the field holds no None, as older writers put for an empty value, too)."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_take_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].default is None}


class Kept(Record):
    """A part of a record whose owner dumps more than sparkctl reads back: every key is kept (a
    record rewritten from it loses nothing), the ones read are typed."""

    model_config = ConfigDict(extra="allow")


class RecordError(SparkctlError):
    """A record on the head that is not what sparkctl writes (torn, edited, another program's)."""


R = TypeVar("R", bound=BaseModel)


def read_record(model: type[R], text: str, path: str) -> Optional[R]:
    """The record in `text` (a state file's content), None when the file is absent (no text)."""
    if not text.strip():
        return None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:3])
        raise RecordError(
            f"unreadable {path}: {where}",
            fix=f"look at {path} on the head; remove it if it is not sparkctl's (the next command rewrites it)",
        ) from None


def dump(record: BaseModel) -> dict[str, JsonValue]:
    """The JSON a record is written as: the keys it was built or read with (a field never set is not
    written, as before the models), values in JSON's types."""
    return record.model_dump(mode="json", exclude_unset=True)


# --- applied.json and history/ -----------------------------------------------------------------


class RuntimeStart(Kept):
    """How a runtime start went (steps/runtime.py): its seconds and warm/cold ("warm ..."|"cold ...")."""

    seconds: Optional[float] = None
    cache: Optional[str] = None


class RecordedContainer(Kept):
    """One container of the recorded launch (launch/plan.py ContainerSpec, as it dumped it)."""

    host: str
    name: str


class RecordedLaunch(Kept):
    """The recorded launch (launch/plan.py LaunchPlan, as it dumped it): the keeper watches its containers."""

    containers: list[RecordedContainer] = Field(default_factory=list)


class AppliedRecord(Record):
    """applied.json: the last good config, what `up`/`reload` applied and saw serving (steps/record.py)."""

    cluster: str = ""
    config_hash: str = "unknown"
    group_hashes: dict[str, str] = Field(default_factory=dict)
    images: dict[str, dict[str, Optional[str]]] = Field(default_factory=dict)  # host -> image ref -> ID
    applied_at: str = "unknown"
    applied_by: str = "unknown"
    command: str = "up"
    runtime_start: Optional[RuntimeStart] = None
    decode_tokens_per_s: Optional[float] = None  # the baseline `reload --min-throughput-ratio` compares with
    decode_by_streams: dict[str, float] = Field(default_factory=dict)  # the same under load, by concurrency
    sparkctl_version: str = ""
    # Inventory.model_dump(mode="json") with secrets as digests: JSON, re-validated where it is run
    # (reload.restore_secrets), since a record an older sparkctl wrote may not be today's schema
    inventory: dict[str, JsonValue] = Field(default_factory=dict)
    launch: RecordedLaunch = Field(default_factory=RecordedLaunch)

    def recorded(self, *path: str) -> JsonValue:
        """One value of the recorded inventory (`recorded("runtime", "image_digest")`), None when absent."""
        node: JsonValue = self.inventory
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node


class HistoryRecord(AppliedRecord):
    """A replaced applied record under history/ (the `history` fact), with its file name."""

    file: str = ""
    unreadable: bool = False  # the file is not a record: listed, never a rollback target


# --- what a reload and the keeper note --------------------------------------------------------


class StopRecord(Kept):
    """How one container's stop went (runtime/containers.py stop_timing, with its host and name)."""

    host: str = ""
    container: str = ""
    seconds: Optional[float] = None
    timeout_s: Optional[float] = None  # the stop timeout it had
    exit_code: Optional[int] = None
    killed: bool = False  # it did not exit on SIGTERM within the timeout: docker sent SIGKILL


class CauseRecord(Kept):
    """Why the keeper found a container gone (keeper/policy.py Cause): what its log names, else how it ended."""

    kind: str = "gone"
    host: Optional[str] = None
    container: Optional[str] = None
    exit_code: Optional[int] = None
    lines: list[str] = Field(default_factory=list)  # the log lines that name it


class ContainerState(Kept):
    """A container as a failed rollback left it."""

    name: str = ""
    state: Optional[str] = None
    config_hash: Optional[str] = None


class HostState(Record):
    """What runs on a host after a failed rollback, or why it could not be read."""

    containers: list[ContainerState] = Field(default_factory=list)
    error: Optional[str] = None


# --- journal.json --------------------------------------------------------------------------------


class TimelineEntry(Record):
    """One phase of a reload: seconds from its start."""

    phase: str
    start: float
    end: Optional[float] = None


class JournalRecord(Record):
    """journal.json: a reload in progress (reload.py Journal), or one that was interrupted."""

    kind: str = "reload"
    from_config: Optional[str] = None
    to_config: Optional[str] = None
    started_at: Optional[str] = None
    by: Optional[str] = None
    lock_token: Optional[str] = None
    resumed: bool = False
    phase: str = "validate"
    timeline: list[TimelineEntry] = Field(default_factory=list)
    stops: list[StopRecord] = Field(default_factory=list)  # each container's stop (steps/runtime.py StopStep)
    hosts_state: Optional[dict[str, HostState]] = None  # what runs where, after a failed rollback

    def interrupted(self) -> str:
        """How a later command names this reload."""
        return (
            f"an interrupted {self.kind} (config {self.from_config} -> {self.to_config}, "
            f"started {self.started_at} by {self.by}, stopped in phase {self.phase!r})"
        )


# --- events.jsonl --------------------------------------------------------------------------------


class Event(Kept):
    """One events.jsonl line (state.event): an applied config, a reload, restart or rollback. A newer
    sparkctl's keys are kept: `history --json` shows the line as it was written."""

    at: str = ""
    by: str = ""
    command: str = ""
    outcome: str = ""
    config_hash: Optional[str] = None
    cache: Optional[str] = None  # "warm"|"cold" of the start, None: no start
    start_seconds: Optional[float] = None
    compile_key: Optional[str] = None
    # reload, restart, rollback (reload.history_event)
    from_config: Optional[str] = None
    reason: Optional[str] = None
    downtime_seconds: Optional[float] = None
    restarted: Optional[list[str]] = None
    stops: Optional[list[StopRecord]] = None
    # a keeper's recovery (keeper/loop.py)
    trigger: Optional[str] = None
    cause: Optional[CauseRecord] = None
    gone: Optional[list[str]] = None


# --- keeper.json ---------------------------------------------------------------------------------


class KeeperRecord(Record):
    """keeper.json: the keeper's state on the head (keeper/loop.py), read by doctor and `status`."""

    state: str = "watching"  # watching, gave_up
    reason: Optional[str] = None  # why it gave up
    cause: Optional[CauseRecord] = None  # the outage's cause
    since: Optional[str] = None  # when it gave up
    recoveries_in_window: int = 0
    max_recoveries: Optional[int] = None
    window_s: float = 0.0
    at: Optional[str] = None  # when it was written


def loads_event(line: str) -> Optional[Event]:
    """One events.jsonl line; None for a line that is not one (torn by a kill mid-append, edited)."""
    try:
        return Event.model_validate(json.loads(line))
    except (ValueError, ValidationError):
        return None
