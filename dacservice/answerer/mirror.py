"""The keys Slurm's synchronous hooks read, held in memory for the answerer (answers.py).

`Mirror` lists `pools/`, `capacity/`, `alive/`, `claims/` and `buffers/` at one revision, then
follows a watch of dac's whole prefix, applying each revision's events together (etcd sends a
revision's events in one message). So the mirror is always exactly etcd's content of those
keys at `revision`; a `daccore.store.Store` built on `MirrorClient` reads it with the same code,
and so gives the same answers, as one reading etcd.

What "current" means. A watch says what changed, never that nothing did, so a probe asks etcd
every PROBE_EVERY seconds, in one read-only txn: how many keys each mirrored prefix holds, and
which changed after the mirror's revision. Same counts and none changed: the mirror is etcd's
content as of the probe's revision, confirmed at the moment the probe was sent
(`confirmed_at`). The answerer answers from the mirror only while that moment is at most
FRESH_FOR seconds old; a mirror whose watch is behind, or that cannot reach etcd, stops being
confirmed and is not used (answers.py reads etcd instead, or refuses).

`MirrorClient` raises `Unsure` instead of answering where the mirror cannot be sure: any
write, lease or watch, a read at a revision other than its own, a range outside the mirrored
prefixes, and a single key it does not hold (one the watch may not have brought yet: a `paths`
for a buffer just made). `Unsure` is a BaseException on purpose: it is not an answer, and must
cross every `except Exception` of the shared handlers (daccore/services/slurm_answer.py) up to
the answerer.
"""

from __future__ import annotations

import bisect
import gc
import logging
import threading
import time
from typing import TYPE_CHECKING, cast

from daccore.errors import StoreUnavailable
from daccore.etcd.stream import Watch
from daccore.etcd.types import (
    KV,
    EtcdRequestError,
    TxnResult,
    WatchCompacted,
    key_bytes,
    range_op,
)
from daccore.records.keys import Keys, prefix_end

if TYPE_CHECKING:
    from typing import Iterator, NoReturn

    from daccore.etcd.client import EtcdClient
    from daccore.etcd.types import Compare, Event, Op, WatchMessage

__all__ = ["Mirror", "MirrorClient", "Unsure", "PROBE_EVERY", "FRESH_FOR"]

log = logging.getLogger(__name__)

#: seconds between two probes of etcd (one read-only txn of 2 ranges per mirrored prefix)
PROBE_EVERY = 0.1
#: the oldest confirmation the answerer answers from
FRESH_FOR = 0.5


class Unsure(BaseException):
    """The mirror cannot answer this read for sure: read etcd, or refuse."""


def _mirrored(keys: Keys) -> tuple[str, ...]:
    return (keys.pools, keys.capacities, keys.alive, keys.claims, keys.buffers)


class Mirror:
    """Thread-safe; `lock` held by a reader makes every read see one revision."""

    def __init__(self, client: EtcdClient, prefix: str):
        self.client = client  # an EtcdClient (http transport)
        self.keys = Keys(prefix)
        self.prefixes = _mirrored(self.keys)
        self.lock = threading.RLock()
        self.revision = 0
        self.confirmed_at: float | None = None
        self.loads = 0  # times the whole mirror was listed (start, compaction, outage)
        #: raised whenever what the mirror holds changes (a listing, an event on a mirrored
        #: key), not when only etcd's revision moves (a probe, an event elsewhere under the
        #: prefix): what the answerer keeps built from the mirror is good while it stays
        self.changes = 0
        self._kvs: dict[bytes, KV] = {}
        self._sorted: list[bytes] = []
        self._stop = threading.Event()
        self._probe_sent: float | None = None  # when the probe under way was sent
        self._probe_failed: str | None = None  # why the last probe failed, if it did
        self._watch: Watch | None = None
        self._threads = [
            threading.Thread(target=self._follow, name="mirror-watch", daemon=True),
            threading.Thread(target=self._probe_loop, name="mirror-probe", daemon=True),
        ]

    # -- what readers ask --------------------------------------------------------------------

    def fresh(self, now: float | None = None) -> bool:
        at = self.confirmed_at
        return at is not None and (now or time.monotonic()) - at <= FRESH_FOR

    def out_of_reach(self, now: float | None = None) -> str | None:
        """Why etcd is out of reach, as the probes see it: the last one failed, or one has
        waited longer than FRESH_FOR; None when they get answers."""
        now = now or time.monotonic()
        sent, failed = self._probe_sent, self._probe_failed
        if sent is not None and now - sent > FRESH_FOR:
            return f"etcd has not answered a probe for {now - sent:.1f}s"
        if failed is not None:
            return f"etcd out of reach: {failed}"
        return None

    def read(
        self, key: str, end: str | None, keys_only: bool, min_mod: int
    ) -> tuple[list[KV], int]:
        """(kvs under [key, end) or the one key, count before min_mod filtering); caller
        holds `lock`."""
        k = key_bytes(key)
        if end is None:
            kv = self._kvs.get(k)
            found = [kv] if kv is not None else []
        else:
            e = key_bytes(end)
            lo, hi = bisect.bisect_left(self._sorted, k), bisect.bisect_left(self._sorted, e)
            found = [self._kvs[x] for x in self._sorted[lo:hi]]
        count = len(found)
        if min_mod:
            found = [kv for kv in found if kv.mod_revision >= min_mod]
        if keys_only:
            found = [kv._replace(value=b"") for kv in found]
        return found, count

    def _count(self, prefix: str) -> int:
        """How many keys under `prefix` (caller holds `lock`): no list built, every probe."""
        lo = bisect.bisect_left(self._sorted, key_bytes(prefix))
        return bisect.bisect_left(self._sorted, key_bytes(prefix_end(prefix))) - lo

    def covers(self, key: str, end: str | None) -> bool:
        for p in self.prefixes:
            if key.startswith(p) and (end is None or end <= prefix_end(p)):
                return True
        return False

    # -- life --------------------------------------------------------------------------------

    def start(self) -> Mirror:
        """List the mirrored keys (raises StoreUnavailable when etcd is out of reach), then
        follow and probe in threads."""
        self._load()
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.close()

    def _load(self) -> None:
        ops = [range_op(p, prefix_end(p)) for p in self.prefixes]
        r = self.client.txn([], ops)
        with self.lock:
            self._kvs = {key_bytes(kv.key): kv for kvs in r.ranges for kv in kvs}
            self._sorted = sorted(self._kvs)
            self.revision = r.revision
            self.confirmed_at = None  # the probe confirms it
            self.loads += 1
            self.changes += 1
            # the listing lives on: the collector need not walk it again (answers' p99)
            gc.collect()
            gc.freeze()
        log.info("mirror listed %d keys at revision %d", len(self._kvs), r.revision)

    def _follow(self) -> None:
        """Apply the watch's events, a revision at a time; list again after a compaction or
        an outage longer than the client's timeout."""
        root = self.keys.root
        while not self._stop.is_set():
            try:
                self._watch = _Batches(self.client, root, prefix_end(root), self.revision + 1)
                for events in cast("Iterator[list[Event]]", iter(self._watch)):
                    self._apply(events)
                    if self._stop.is_set():
                        return
            except (WatchCompacted, StoreUnavailable, EtcdRequestError) as e:
                if self._stop.is_set():
                    return
                log.warning("mirror watch: %s; listing again", e)
                with self.lock:
                    self.confirmed_at = None
                self._relist()

    def _relist(self) -> None:
        while not self._stop.is_set():
            try:
                self._load()
                return
            except (StoreUnavailable, EtcdRequestError) as e:
                log.warning("mirror cannot list: %s", e)
                self._stop.wait(0.5)

    def _apply(self, events: list[Event]) -> None:
        with self.lock:
            for ev in events:
                if not self.covers(ev.kv.key, None):
                    continue
                self.changes += 1
                k = key_bytes(ev.kv.key)
                if ev.type == "put":
                    if k not in self._kvs:
                        bisect.insort(self._sorted, k)
                    self._kvs[k] = ev.kv
                elif self._kvs.pop(k, None) is not None:
                    del self._sorted[bisect.bisect_left(self._sorted, k)]
            self.revision = max(self.revision, max(ev.kv.mod_revision for ev in events))

    def _probe_loop(self) -> None:
        while not self._stop.wait(PROBE_EVERY):
            self._probe_sent = time.monotonic()
            try:
                self.probe()
                self._probe_failed = None
            except (StoreUnavailable, EtcdRequestError) as e:
                self._probe_failed = " ".join(str(e).split())
                log.debug("mirror probe: %s", e)
            finally:
                self._probe_sent = None

    def probe(self) -> bool:
        """Confirm the mirror against etcd (module docstring); True when confirmed."""
        with self.lock:
            mine = self.revision
        sent = time.monotonic()
        ops = [range_op(p, prefix_end(p), count_only=True) for p in self.prefixes]
        ops += [
            range_op(p, prefix_end(p), keys_only=True, min_mod_revision=mine + 1)
            for p in self.prefixes
        ]
        r = self.client.txn([], ops)
        n = len(self.prefixes)
        with self.lock:
            if self.revision > mine:  # the watch went on meanwhile
                ok = self.revision >= r.revision
            else:
                counts = [self._count(p) for p in self.prefixes]
                ok = counts == list(r.counts[:n]) and not any(r.ranges[n:])
                if ok:
                    self.revision = max(self.revision, r.revision)
            if ok:
                self.confirmed_at = max(self.confirmed_at or 0.0, sent)
        return ok


class _Batches(Watch):
    """A Watch that yields each message's events as one list (one revision's, or more)."""

    # yields lists of events, not events: _follow iterates it through a cast
    def _deliver(self, msg: WatchMessage) -> Iterator[list[Event]]:  # type: ignore[override]
        events = list(super()._deliver(msg))
        if events:
            yield events


class MirrorClient:
    """A `daccore.etcd.types.EtcdApi` for `daccore.store.Store`: its reads answered from a
    Mirror, `Unsure` where they cannot be and for the rest (module docstring). Readers hold
    `mirror.lock`."""

    def __init__(self, mirror: Mirror, endpoints: list[str]):
        self.mirror = mirror
        self.endpoints = endpoints  # the store names its views cache after them
        self.timeout = 0.0

    def _range(
        self, key: str, end: str | None, keys_only: bool, count_only: bool, rev: int, min_mod: int
    ) -> tuple[list[KV], int]:
        m = self.mirror
        if rev and rev != m.revision:
            raise Unsure(f"a read at revision {rev}, the mirror's is {m.revision}")
        if not m.covers(key, end):
            raise Unsure(f"{key}: not a mirrored key")
        kvs, count = m.read(key, end, keys_only, min_mod)
        if end is None and not kvs:
            raise Unsure(f"{key}: not in the mirror (yet?)")
        return ([] if count_only else kvs), count

    def range(
        self, key: str, range_end: str | None = None, *, keys_only: bool = False, revision: int = 0
    ) -> tuple[list[KV], int]:
        kvs, _ = self._range(key, range_end, keys_only, False, revision, 0)
        return kvs, self.mirror.revision

    def get(self, key: str) -> KV | None:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def txn(
        self, compare: list[Compare], success: list[Op], failure: list[Op] | None = None
    ) -> TxnResult:
        if compare or any(op.kind != "range" for op in success):
            raise Unsure("a write")
        ranges: list[list[KV]] = []
        counts: list[int] = []
        for op in success:
            kvs, count = self._range(
                op.key,
                op.range_end,
                op.keys_only,
                op.count_only,
                op.revision,
                op.min_mod_revision,
            )
            ranges.append(kvs)
            counts.append(count)
        return TxnResult(True, self.mirror.revision, ranges, counts)

    # -- the rest of EtcdApi: not reads, so Unsure (the answer reads etcd) --------------------

    def put(self, key: str, value: str | bytes, lease: int = 0) -> NoReturn:
        raise _reads_only("put")

    def delete(self, key: str, range_end: str | None = None) -> NoReturn:
        raise _reads_only("delete")

    def lease_grant(self, ttl: int) -> NoReturn:
        raise _reads_only("lease_grant")

    def lease_keepalive(self, lease: int) -> NoReturn:
        raise _reads_only("lease_keepalive")

    def lease_time_to_live(self, lease: int) -> NoReturn:
        raise _reads_only("lease_time_to_live")

    def lease_revoke(self, lease: int) -> NoReturn:
        raise _reads_only("lease_revoke")

    def watch(self, key: str, range_end: str | None = None, start_revision: int = 0) -> NoReturn:
        raise _reads_only("watch")


def _reads_only(method: str) -> Unsure:
    return Unsure(f"the answerer's mirror answers reads only: {method}")
