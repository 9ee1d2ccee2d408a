"""The head's records (sparkctl/records.py) as the facts read them back: what the writer builds is
what a check or a step gets, a record another sparkctl wrote still reads, and one that cannot be
read is a message naming the file (the fact's error, doctor's finding), never a traceback.

The records below marked "made up" are written for the case they test; the events are the lab
head's own (tests/unit/recorded/state/events_rolled_back.jsonl, recorded after the rolled-back
reload drill)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostfacts import host_facts, inventory, sec
from test_checks import INV as DOCTOR_INV
from test_checks import H, by, edit, run, sections
from test_reload_plan import changed, recorded

from sparkctl import state
from sparkctl.errors import InputError
from sparkctl.history import rollback_targets
from sparkctl.keeper.policy import Cause
from sparkctl.launch.keeper import UNIT, UNIT_PATH
from sparkctl.records import JournalRecord, KeeperRecord, TimelineEntry, dump
from sparkctl.reload import _history_record

INV = inventory()
EVENTS = (Path(__file__).parent / "recorded" / "state" / "events_rolled_back.jsonl").read_text()


def head(**sections):
    return host_facts(INV, "head", **{k: sec(v) for k, v in sections.items()})


def test_what_the_writers_build_is_what_the_facts_read_back():
    applied = recorded()  # steps/record.py's record for the lab inventory
    cause = Cause("OOM", "head", "sparkctl-head", 137, ("CUDA out of memory",)).record()
    keeper = KeeperRecord(state="gave_up", reason="3 recoveries within 600 s", cause=cause, since="2026-12-05T10:00:00Z")
    journal = JournalRecord(kind="rollback", from_config="a" * 16, to_config="b" * 16, timeline=[])
    journal.timeline.append(TimelineEntry(phase="drain", start=0.4, end=None))
    event = state.event("restart", "ok", "c" * 16, applied.runtime_start, "k", trigger="keeper", cause=cause)
    line = json.dumps(dump(event), separators=(",", ":"), sort_keys=True)  # as state.append_event writes it

    f = head(
        applied=json.dumps(dump(applied), indent=2),
        keeper=json.dumps(dump(keeper)),
        journal=json.dumps(dump(journal)),
        events=EVENTS + line + "\n",
    )
    assert not f.errors
    assert f.applied == applied and f.applied.launch.containers  # the keeper watches these
    assert ("head", "sparkctl-head") in [(c.host, c.name) for c in f.applied.launch.containers]
    assert f.keeper == keeper and f.keeper.cause is not None and f.keeper.cause.kind == "OOM"
    assert f.journal == journal and f.journal.timeline[0].end is None
    assert f.events[-1] == event and [e.outcome for e in f.events] == ["applied", "rolled back", "ok"]


def test_a_record_another_sparkctl_wrote_reads_with_defaults_and_keeps_what_it_does_not_know():
    # made up: an older record (no launch, no images yet, a null where a map is now) with a key this
    # sparkctl does not know, and a launch with fields it does not read
    old = {"config_hash": "bd13c40c73ed40a8", "applied_at": "2026-11-29T15:38:54Z", "images": None, "retired": 1}
    f = head(applied=json.dumps(old), journal=json.dumps({"to_config": "x", "phase": "drain"}))
    assert not f.errors
    assert (f.applied.config_hash, f.applied.images, f.applied.launch.containers) == ("bd13c40c73ed40a8", {}, [])
    assert f.journal.interrupted() == ("an interrupted reload (config None -> x, started None by None, stopped in phase 'drain')")

    newer = {**dump(recorded()), "launch": {"containers": [{"host": "head", "name": "n", "gpus": "all"}], "added": 2}}
    f = head(applied=json.dumps(newer))
    assert f.applied.launch.containers[0].name == "n"
    assert dump(f.applied)["launch"] == newer["launch"]  # rewritten whole: nothing it did not know is lost


@pytest.mark.parametrize(
    "fact, text, says",
    [
        ("applied", '{"config_hash": "bd13', "applied.json: (top): Invalid JSON"),
        ("applied", '["not", "a", "record"]', "applied.json: (top): Input should be an object"),
        ("journal", '{"timeline": 3}', "journal.json: timeline: Input should be a valid array"),
        ("keeper", '{"recoveries_in_window": "many"}', "keeper.json: recoveries_in_window: Input should be a valid integer"),
    ],
)
def test_a_record_that_cannot_be_read_is_the_facts_error_naming_the_file(fact, text, says):
    f = head(**{fact: text})  # made up: torn, another program's, edited by hand
    assert getattr(f, fact) is None
    assert f.errors[fact].startswith(f"unreadable {state.STATE_DIR}/") and says in f.errors[fact]


def test_a_torn_or_foreign_events_line_is_skipped_not_fatal():
    lines = EVENTS + '{"command": "reload", "start_seconds": "fast"}\n{"at": "2026-12-01T05:00:00Z", "comm'
    f = head(events=lines)
    assert not f.errors and [e.command for e in f.events] == ["up", "reload"]


def test_a_history_file_that_is_not_a_record_is_listed_but_never_a_rollback_target():
    newer = recorded(changed(served_model_name="renamed"))
    text = (
        f"@@file 20261129T153854Z-old.json\n{json.dumps(dump(recorded()))}\n"
        '@@file 20261130T000000Z-torn.json\n{"config_hash": \n'  # made up: cut off mid-write
        f"@@file 20261201T000000Z-newer.json\n{json.dumps(dump(newer))}\n"
    )
    f = head(history=text)
    assert [(h.file, h.unreadable) for h in f.history] == [
        ("20261129T153854Z-old.json", False),
        ("20261130T000000Z-torn.json", True),
        ("20261201T000000Z-newer.json", False),
    ]
    # `history` numbers the targets as `rollback --to` counts them, and names the torn file apart
    targets = {t.n: (t.file, t.config_hash) for t in rollback_targets(f.history)}
    assert targets == {
        2: ("20261129T153854Z-old.json", recorded().config_hash),
        1: ("20261201T000000Z-newer.json", newer.config_hash),
    }
    for n, (file, config_hash) in targets.items():
        assert (_history_record(f.history, n).file, _history_record(f.history, n).config_hash) == (file, config_hash)
    with pytest.raises(InputError, match="the head keeps 2 earlier config"):
        _history_record(f.history, 3)


def test_an_event_a_newer_sparkctl_wrote_keeps_the_keys_this_one_does_not_know():
    line = '{"at": "2026-12-06T01:00:00Z", "command": "reload", "outcome": "ok", "rollout": "canary-2"}\n'  # made up
    f = head(events=EVENTS + line)
    assert dump(f.events[-1]) == json.loads(line)  # what `history --json` prints


def keeper_doctor(keeper_json: str):
    """doctor's keeper.state on the recorded healthy lab with the keeper on, its unit active, and this state file."""
    on = DOCTOR_INV.model_copy(update={"keeper": DOCTOR_INV.keeper.model_copy(update={"enabled": True})})
    unit = f"command /usr/local/bin/sparkctl\nsystemctl /usr/bin/systemctl\nenabled enabled\nactive active\nsum {UNIT_PATH} {'a' * 64}\n"
    secs = edit(edit(sections(), H, "keeper_unit", unit), H, "keeper", keeper_json)
    return by(run(secs, inv=on, only=["keeper"]), "keeper.state", H)


def test_doctor_names_why_the_keeper_gave_up_and_an_unreadable_state_file():
    cause = Cause("OOM", "head", "sparkctl-head", 137, ("CUDA out of memory",)).record()
    gave_up = KeeperRecord(state="gave_up", reason="3 recoveries within 600 s", cause=cause, since="2026-12-05T10:00:00Z")
    r = keeper_doctor(json.dumps(dump(gave_up)))
    assert r.status == "failed" and "gave up at 2026-12-05T10:00:00Z: 3 recoveries within 600 s" in r.message
    assert r.data["cause"]["kind"] == "OOM"  # JSON in doctor --json, not a model

    r = keeper_doctor('{"state": ["gave_up"]}')  # made up: not a record this sparkctl reads
    assert r.status == "warn" and f"{UNIT} active, but unreadable {state.KEEPER}: state:" in r.message
    assert state.KEEPER in r.fix

    assert keeper_doctor(json.dumps(dump(KeeperRecord(recoveries_in_window=1, window_s=600)))).status == "ok"


def test_every_model_of_sparkctl_is_built_when_its_module_is_imported():
    """A model pydantic could not build at import is built on first use, which pydantic before 2.14
    does not make thread safe (pydantic #13438: "BaseModel cannot be instantiated directly" from a
    second thread); the facts read these records in a thread per host, at the pydantic floor too."""
    import importlib
    import pkgutil

    from pydantic import BaseModel

    import sparkctl

    for m in pkgutil.walk_packages(sparkctl.__path__, "sparkctl."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)

    def subclasses(cls: type) -> list[type]:
        return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]

    ours = [c for c in subclasses(BaseModel) if c.__module__.startswith("sparkctl.")]
    assert len(ours) > 40  # the walk imported them
    assert [f"{c.__module__}.{c.__qualname__}" for c in ours if not c.__pydantic_complete__] == []
