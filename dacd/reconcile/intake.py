"""Which buffers this dacd looks at, and when.

At start it lists the claims on this host's bricks and looks at each buffer they give it
(dacd/reconcile/claims.py), then follows, from the listing's revision, a watch on those claims
(a buffer arrives on this host, or leaves it) and a watch on this host's work keys
(`work/<host>/<buffer>`, put with every change of a spec it acts on), whose events it acts on
only for the buffers it holds claims of. Every `resync` seconds it also compares the held
specs' revisions with those it last acted on, and drops work keys naming no buffer of its host.

A buffer looked at is reconciled by one worker at a time, from a pool of `concurrency`
workers, so one slow buffer never blocks the others; changes that arrive meanwhile are folded
into one more pass.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from daccore.errors import DacError, Fenced, InternalError, StoreUnavailable, Superseded
from daccore.escape import printable
from daccore.etcd.types import WatchCompacted
from dacd import metrics

if TYPE_CHECKING:
    from daccore.etcd.stream import Watch
    from daccore.store import Store
    from dacd.reconcile.claims import Claims
    from dacd.reconcile.refusals import Refusals

log = logging.getLogger("dacd.reconciler")  # the reconciler's lines, whichever part says them

__all__ = ["Intake"]


class Intake:
    """The listing, the watches, the resync and the workers (see the module's docstring).
    `reconcile(name)` is one buffer's pass; `planned(names)` those of the buffers only passive
    claims name that have a split stage's plan (SplitShares.planned)."""

    def __init__(
        self,
        store: Store,
        host: str,
        claims: Claims,
        refusals: Refusals,
        reconcile: Callable[[str], None],
        planned: Callable[[set[str]], list[str]],
        *,
        workers: int,
        stopping: threading.Event,
        resync: float,
    ) -> None:
        self._store, self._host, self._claims, self._refusals = store, host, claims, refusals
        self._reconcile, self._planned, self._stopping = reconcile, planned, stopping
        self.resync_every = resync  # seconds, each spread by +-50 %
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="reconcile")
        self._lock = threading.Lock()
        self._busy: set[str] = set()  # buffers a worker is on
        self._again: set[str] = set()  # of those, the ones changed meanwhile
        self._watch: Watch | None = None
        self._watches: list[Watch] = []
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        revision = self.list_all()
        self.threads = [
            threading.Thread(target=self._follow, args=(revision,), name="watch-work", daemon=True)
        ]
        self.threads += [
            threading.Thread(
                target=self._follow_claims,
                args=(pool, revision),
                name=f"watch-claims-{pool}",
                daemon=True,
            )
            for pool in self._claims.pools
        ]
        self.threads.append(threading.Thread(target=self._resync_loop, name="resync", daemon=True))
        for t in self.threads:
            t.start()

    def close(self) -> None:
        """The watches closed: no event is acted on any more."""
        for w in [self._watch, *self._watches]:
            if w is not None:
                w.close()

    def shutdown(self) -> None:
        """The workers: a step under way finishes (a playbook cut short is re-run at the next
        start anyway), no other starts."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def list_all(self) -> int:
        """Reconcile every buffer holding a brick of this host; the revision read at."""
        found, revision = self._store.host_claims(self._host, self._claims.pools)
        for key in sorted(k for k, claim in found.items() if claim is None):
            self._refusals.log_once(key, f"{printable(key)}: not a brick claim")
        held, passive = self._claims.replace(found)
        for name in held:
            self.schedule(name)
        for name in self._planned(passive):  # a dacd restarted mid-share resumes it
            self.schedule(name)
        dropped = self._store.drop_stray_work(self._host, self._claims.pools)
        if dropped:
            log.info(
                "dropped work keys of buffers holding no brick here: %s",
                ", ".join(printable(n) for n in dropped[:10]),
            )
        return revision

    def relist(self) -> None:
        """After a new lease (the old one lapsed: steps were fenced meanwhile): look at every
        buffer of this host again."""
        if self._stopping.is_set():
            return
        try:
            self.list_all()
            log.info("registered again with a new lease: looking at every buffer again")
        except DacError as e:
            log.warning(
                "could not list this host's buffers after a new lease (%s); the watches bring them",
                e,
            )

    def resync(self) -> None:
        """The held buffers whose spec changed since this host last acted on it (a work key
        that never came) looked at, and the stray work keys dropped."""
        held, acted = self._claims.acted_on()
        for name, revision in self._store.spec_revisions(held).items():
            if acted.get(name) != revision:
                self.schedule(name)
        self._store.drop_stray_work(self._host, self._claims.pools)

    def schedule(self, name: str) -> None:
        with self._lock:
            if name in self._busy:
                self._again.add(name)
                return
            self._busy.add(name)
        try:
            self._pool.submit(self._work, name)
        except RuntimeError:  # shutting down
            with self._lock:
                self._busy.discard(name)

    def _work(self, name: str) -> None:
        while True:
            try:
                self._reconcile(name)
            except Fenced as e:  # the lease lapsed: relist() brings the buffer back
                metrics.etcd_error("reconcile", e)
                log.warning("buffer %s: not acted on: %s", name, e)
            except Superseded as e:  # the buffer of that name now, if any, is looked at anew
                log.info("%s", e)
                continue
            except Exception as e:  # noqa: BLE001 - a worker must never die silently
                metrics.etcd_error("reconcile", e)
                log.exception("buffer %s: reconcile failed", name)
            with self._lock:
                if name in self._again and not self._stopping.is_set():
                    self._again.discard(name)
                    continue
                self._busy.discard(name)
                return

    def _follow(self, revision: int = 0) -> None:
        """This host's work keys: a put is a change of a spec this host acts on, acted on for
        the buffers it holds claims of. One that comes before its claims' event is not lost:
        the claims' event schedules the buffer too. A delete goes with the spec's (its claims'
        event says so)."""
        while not self._stopping.is_set():
            try:
                self._watch, changes = self._store.watch_host_work(self._host, revision + 1)
                for change in changes:
                    revision = change.revision
                    if change.record is None:
                        continue
                    if self._claims.holds(change.name) or self._claims.passive_holds(change.name):
                        self.schedule(change.name)  # passive: a split stage's plan names it
                    else:  # its claim's event may still be coming: _follow_claims looks then
                        self._claims.woke_early(change.name)
            except WatchCompacted:
                log.warning("work watch compacted; listing this host's buffers again")
                revision = self.list_all()
            except (StoreUnavailable, InternalError) as e:
                if self._stopping.is_set():
                    return
                metrics.etcd_error("watch", e)
                log.warning("work watch failed (%s); resuming from revision %d", e, revision)
                time.sleep(1)

    def _follow_claims(self, pool: str, revision: int) -> None:
        """Claims made and released on this host's bricks in `pool`: a buffer arriving is
        reconciled at once; one leaving is looked at once more (its spec may be gone)."""
        while not self._stopping.is_set():
            try:
                watch, changes = self._store.watch_host_claims(self._host, pool, revision + 1)
                self._watches.append(watch)
                for change in changes:
                    revision = change.revision
                    if change.bad:  # it holds no brick for any buffer: counted as used only
                        self._refusals.log_once(
                            change.name, f"{printable(change.name)}: not a brick claim"
                        )
                    elif change.record is None:
                        self._refusals.forget(change.name)
                    for name in self._claims.apply(change):
                        self.schedule(name)
            except WatchCompacted:
                log.warning("claim watch compacted; listing this host's buffers again")
                revision = self.list_all()
            except (StoreUnavailable, InternalError) as e:
                if self._stopping.is_set():
                    return
                metrics.etcd_error("watch", e)
                log.warning("claim watch failed (%s); resuming from revision %d", e, revision)
                time.sleep(1)

    def _resync_loop(self) -> None:
        """Now and then: resync()."""
        while not self._stopping.wait(self.resync_every * random.uniform(0.5, 1.5)):
            try:
                self.resync()
            except DacError as e:
                log.warning("resync failed (%s); trying again later", e)
