"""The cluster lock: one changing run at a time, held on the head.

Every command that changes the cluster (`up`, `down`, `reload`, `restart`, `rollback`) holds it
from before its first change to its end; read-only commands (doctor, status, render, any --check)
never take it. It is a file on the head,
`/var/lib/sparkctl/state/lock`, created atomically over the run's SSH session (written to a temp
file, then hard-linked into place: `ln` fails if the lock exists, so exactly one run wins) and
holding who took it: user, pid and name of the control host, command line, start time, a token.

While it runs, the holder renews a heartbeat (the file's mtime) every few seconds. Another run
either waits for it (`--wait SECONDS`) or is refused with the holder named. A holder that is gone
(its pid no longer runs on this control host, or no heartbeat for STALE_AFTER seconds) is
reported as such; the lock is never broken automatically (the gone run may have left things half
done for a human to look at): `sparkctl unlock` breaks it after a confirmation.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager, suppress
from typing import Callable, Iterator, Optional

from pydantic import BaseModel, ConfigDict

from sparkctl import interrupts
from sparkctl.errors import HostError, SparkctlError
from sparkctl.state import LOCK as LOCK_PATH  # one place names the head's state files
from sparkctl.state import STATE_DIR
from sparkctl.transport.redact import redact

HEARTBEAT_EVERY = 5.0  # seconds between renewals of the lock's mtime
STALE_AFTER = 30.0  # a heartbeat this old means the holder is gone (six renewals missed)
POLL_EVERY = 1.0  # how often a waiting run looks again
_LOCK = shlex.quote(LOCK_PATH)
# the holder record, then the lock's mtime and the head's clock: heartbeat age by one clock
_READ = f"cat {_LOCK} 2>/dev/null && stat -c %Y {_LOCK} && date +%s"


class LockHeld(SparkctlError):
    """Another run holds the cluster lock (or held it and is gone)."""

    exit_code = 1


class Holder(BaseModel):
    """What the lock file says about the run that holds it, plus how fresh it is."""

    model_config = ConfigDict(frozen=True)

    user: str
    pid: int
    host: str  # the control host the run was started on
    command: str
    started_at: float  # epoch seconds on the holder's control host
    token: str
    pid_start: Optional[int] = None  # /proc/PID/stat start time: a reused pid is not the holder
    heartbeat_age: Optional[float] = None  # seconds since the last renewal, by the head's clock

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.started_at)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"{self.user}@{self.host} (pid {self.pid}) running `{self.command}` since {since} ({_duration(self.age)} ago)"

    def gone(self) -> Optional[str]:
        """Why the holder looks gone, or None while it looks alive."""
        if self.host == socket.gethostname():
            start = _process_start(self.pid)
            if start is None:
                return f"pid {self.pid} no longer runs on {self.host}"
            if self.pid_start is not None and start != self.pid_start:
                return f"pid {self.pid} on {self.host} is now another process"
        if self.heartbeat_age is not None and self.heartbeat_age > STALE_AFTER:
            return f"no heartbeat for {_duration(self.heartbeat_age)} (renewed every {HEARTBEAT_EVERY:g} s while it runs)"
        return None

    def to_dict(self) -> dict:
        return self.model_dump(exclude={"token"}) | {"age_seconds": round(self.age, 1), "gone": self.gone()}


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _process_start(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot, or None if no such process runs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _acquire_script(doc: str) -> str:
    # ln(2) of a complete temp file: the lock appears atomically, whole, or not at all.
    state = shlex.quote(STATE_DIR)
    return (
        f"mkdir -p {state} && chmod 700 {state} && tmp=$(mktemp {state}/.lock.XXXXXX) && "
        f"printf '%s\\n' {shlex.quote(doc)} > \"$tmp\" && "
        f'if ln "$tmp" {_LOCK} 2>/dev/null; then rm -f "$tmp"; echo ACQUIRED; '
        # `|| :`: a lock released between the ln and the cat is no failure: try_acquire looks again
        f'else rm -f "$tmp"; echo HELD; {_READ} || :; fi'
    )


def _remove_if_held_by(token: str) -> str:
    """Shell: remove the lock only while it holds `token` (never a lock another run took since)."""
    return f"if grep -qF {token} {_LOCK} 2>/dev/null; then rm -f {_LOCK}; echo removed; fi"


def probe() -> str:
    """The lock as a fact: nothing when free, else what parse_holder reads (facts/host.py's
    `lock` kind runs this in the head's round trip)."""
    return f"if [ -e {_LOCK} ]; then {_READ}; fi"


def parse_holder(text: str) -> Optional[Holder]:
    """The holder from `cat lock; stat -c %Y lock; date +%s` output (None if absent or unreadable)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 3:
        return None
    try:
        mtime, now = int(lines[-2]), int(lines[-1])
        return Holder(**json.loads(lines[-3]), heartbeat_age=max(0.0, float(now - mtime)))
    except (ValueError, TypeError):  # not JSON, not an object, a field missing or mistyped (pydantic)
        return None


def read_holder(session) -> Optional[Holder]:
    """Who holds the lock on this (head) session's host, or None."""
    r = session.run(probe())
    r.check("read the cluster lock")
    if not r.stdout.strip():
        return None
    holder = parse_holder(r.stdout)
    if holder is None:
        raise unreadable(session.name, r.stdout)
    return holder


def unreadable(host: str, text: str) -> HostError:
    """A lock file that is there but holds no holder record."""
    return HostError(
        f"{host}: the cluster lock {LOCK_PATH} is unreadable: {redact(text.strip())[:200]}",
        fix="look at the file on the head; if no sparkctl run is using the cluster, `sparkctl unlock` removes it",
    )


def refusal(holder: Holder, cluster: str, waited: float = 0) -> LockHeld:
    why = holder.gone()
    if why:
        return LockHeld(
            f"cluster {cluster} is locked by {holder.describe()}, and that run looks gone: {why}",
            fix="if no sparkctl run is changing this cluster, break the lock: sparkctl unlock "
            "(then check `sparkctl doctor`: the gone run may have stopped half-way)",
        )
    waited_text = f" (waited {waited:.0f} s)" if waited else ""
    return LockHeld(
        f"cluster {cluster} is locked by {holder.describe()}{waited_text}",
        fix="let that run finish, or rerun with --wait SECONDS to wait for it",
    )


class ClusterLock:
    """The lock held by this run: acquire, heartbeat, release."""

    def __init__(self, session, cluster: str, notify: Callable[[str], None] | None = None, wait: float = 0.0):
        self.session = session
        self.cluster = cluster
        self.notify = notify or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.me = Holder(
            user=getpass.getuser(),
            pid=os.getpid(),
            host=socket.gethostname(),
            command=redact(shlex.join(["sparkctl", *sys.argv[1:]])),  # secrets on the command line masked
            started_at=time.time(),
            token=uuid.uuid4().hex,
            pid_start=_process_start(os.getpid()),
        )
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None
        self.lost: Optional[str] = None  # set when the heartbeat found the lock broken
        self.held = False
        self.wait = wait  # how long `take` waits for another run's lock (--wait)

    def take(self, over: Optional[Callable[[Holder], bool]] = None) -> None:
        """Acquire for the rest of the run (a lazily held lock: before the first change). `over`
        decides whether a holder that is gone may be replaced (a reload finishing the interrupted
        reload that held it); it may raise its own refusal instead. Never a live holder."""
        if self.held:
            return
        try:
            self.acquire(self.wait)
        except LockHeld:
            if over is None:
                raise
            holder = read_holder(self.session)
            if holder is None or not holder.gone() or not over(holder):
                raise
            break_lock(self.session, holder)
            self.acquire(0)

    def _record(self) -> str:
        return self.me.model_dump_json(exclude={"heartbeat_age"})

    def try_acquire(self, attempts: int = 3) -> Optional[Holder]:
        """Take the lock if free; else return its holder."""
        r = self.session.run(_acquire_script(self._record()))
        r.check("take the cluster lock")
        first, _, rest = r.stdout.partition("\n")
        if first.strip() == "ACQUIRED":
            return None
        holder = parse_holder(rest)
        if holder is not None:
            return holder
        if attempts <= 1:  # there, but not a holder record (or gone at every look, which no release does)
            raise unreadable(self.session.name, rest.strip() or "(nothing readable)")
        time.sleep(0.1)  # released between our ln and our cat, or being written: look again
        return self.try_acquire(attempts - 1)

    def acquire(self, wait: float = 0) -> None:
        deadline = time.monotonic() + max(0.0, wait)
        told = False
        while True:
            try:
                holder = self.try_acquire()
            except BaseException:
                # Ctrl-C or SIGTERM (raised as KeyboardInterrupt) after the head's `ln` made the lock
                # ours but before its answer came back: released as the run never knew it held it
                self._remove_mine()
                raise
            if holder is None:
                break
            remaining = deadline - time.monotonic()
            if holder.gone() or remaining <= 0:  # a gone holder never releases: waiting is pointless
                raise refusal(holder, self.cluster, waited=wait if remaining <= 0 else 0)
            if not told:
                self.notify(f"waiting up to {wait:.0f} s for the cluster lock: held by {holder.describe()}")
                told = True
            time.sleep(min(POLL_EVERY, remaining))
        self.held = True
        self._beat = threading.Thread(target=self._heartbeat, name="sparkctl-lock-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        beat = f"grep -qF {self.me.token} {_LOCK} && touch {_LOCK}"  # renewed only while the lock is ours
        while not self._stop.wait(HEARTBEAT_EVERY):
            try:
                r = self.session.run(beat, timeout=HEARTBEAT_EVERY * 2)
            except SparkctlError:
                continue  # the run's own calls report the host; keep trying while it runs
            if not r.ok and self.lost is None:
                self.lost = "the cluster lock was broken (sparkctl unlock?) while this run held it"
                self.notify(f"warning: {self.lost}")

    def _remove_mine(self) -> None:
        with suppress(Exception):  # best effort: a lock left behind is reported as gone and `unlock` clears it
            self.session.run(_remove_if_held_by(self.me.token), timeout=10)

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        self._stop.set()
        if self._beat is not None:
            self._beat.join(HEARTBEAT_EVERY * 2 + 1)
        try:
            self.session.run(_remove_if_held_by(self.me.token)).check("release the cluster lock")
        except SparkctlError as exc:
            self.notify(
                f"warning: could not release the cluster lock on {self.session.name} ({exc.message}); the next "
                "run will report it as held by a gone run: `sparkctl unlock` then clears it"
            )


@contextmanager
def cluster_lock(
    fleet, wait: float = 0, hold: bool = True, notify: Callable[[str], None] | None = None
) -> Iterator[Optional[ClusterLock]]:
    """The one way a command that changes the cluster (up, down, reload, restart, rollback) holds
    the lock: on the head of `fleet`, for the body, yielded untaken: the runner (or reload, once
    confirmed) takes it before the first change (a run that changes nothing never writes it); it
    is released when the body ends, also when SIGTERM or SIGHUP ends it (as Ctrl-C: exit 130).
    `hold=False` (a --check run) yields no lock."""
    if not hold:
        yield None
        return
    head = fleet.inventory.hosts_with_role("head")[0]
    lock = ClusterLock(fleet[head], fleet.inventory.cluster.name, notify=notify, wait=wait)
    previous = interrupts.on_termination()
    try:
        yield lock
    finally:
        lock.release()
        interrupts.restore(previous)


def break_lock(session, holder: Holder) -> bool:
    """Remove the lock if it is still `holder`'s (never a lock taken since it was read)."""
    r = session.run(_remove_if_held_by(holder.token))
    r.check("break the cluster lock")
    return r.stdout.strip() == "removed"
