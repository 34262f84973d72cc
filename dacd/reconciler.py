"""Driving every buffer that has a brick on this host toward its desired state.

At start it lists the claims on this host's bricks and reconciles each buffer they name (so a
restart finishes, or cleanly fails, whatever was in flight: every step is idempotent), then
follows, from the listing's revision, a watch on those claims (a buffer arrives on this host,
or leaves it) and a watch on this host's work keys (`work/<host>/<buffer>`, put with every
change of a spec it acts on), whose events it acts on only for the buffers it holds claims
of: on a site of 1,000 servers, a spec change reaches one or a few dacds, not all
(bench/scale.py, docs/performance.md). Every `resync` seconds it also compares the held
specs' revisions with those it last acted on, and drops work keys naming no buffer of its
host: the net for a write cut short between a big buffer's spec and the rest of its work
keys, and for a stray key. Each buffer is worked on by one
worker at a time, from a pool of `concurrency` workers, so one slow buffer never blocks the
others; changes that arrive meanwhile are folded into one more pass. A pass asks
`daccore.records.lifecycle.next_step`, runs that step's playbook, records the state reached (or the
error, with who must act) in status/<buffer>/<host>, and repeats. When every host of a buffer
has reached DELETED, the primary host's dacd removes the spec, the statuses and the claims in
one transaction (claims first, in chunks, for a buffer too big for one): the bricks are free
again.

Stages (stage_in, stage_out) run on their own pool of `concurrency` threads, not on the
workers: a stage may take an hour, or hang until dacd kills it, and meanwhile every other
buffer's steps and every teardown still proceed. A buffer whose spec turns to DELETED while its
stage runs has the copier killed at once (dacd.staging.run.Run), so teardown frees its bricks.

For a backend whose steps run once for all hosts (lustre, daos: daccore.backends), only the
primary host's dacd works on the buffer, and it records each state for every host of it.

Nothing read from etcd is trusted: the watch carries names only, and each pass reads the spec
and the statuses unparsed and checks them (daccore.rules.trust). A record that breaks a rule is
logged once (one line naming its key and the rule; again only if the reason changes) and
skipped until it changes, and the host's status says so (category admin) when the record
names this host; the watch and every other buffer go on.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from daccore.backends import get as get_backend
from daccore.backends import runs_once_for_all_hosts
from daccore.errors import (
    Conflict,
    DacError,
    Fenced,
    InternalError,
    Kind,
    StoreUnavailable,
    Superseded,
)
from daccore.escape import printable
from daccore.etcd.types import WatchCompacted
from daccore.records.bounds import BUFFER_NAME
from daccore.records.lifecycle import next_step, retry_after
from daccore.records.models import Progress, State, Status, StatusError
from daccore.rules.trust import Untrusted, parse_buffer, shown
from dacd import metrics
from dacd.owed import RETRY as OWED_RETRY
from dacd.owed import leave_owed, retry_owed
from dacd.staging.shares import SplitShares

log = logging.getLogger(__name__)

__all__ = ["Reconciler", "RESYNC"]

#: early wake-ups kept at most (_early): a work key of a buffer never claimed here is a stray
EARLY_MAX = 4096
#: Seconds between two looks at the revisions of the specs this host works on (each spread
#: by +-50 % so that a site's dacds started together do not look together): one keys-only
#: read a dacd, a spec read only for a buffer changed unseen.
RESYNC = 600.0


class Reconciler(SplitShares):
    def __init__(
        self,
        store,
        config,
        host: str,
        run_step: Callable | None = None,
        resync: float = RESYNC,
        owed_retry: float = OWED_RETRY,
        injob=None,
    ):
        from dacd.runner import run_step as default_run

        self.store, self.config, self.host = store, config, host
        self._run_step = run_step or default_run
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="reconcile")
        self._stages = ThreadPoolExecutor(config.concurrency, thread_name_prefix="stage")
        self._staging: dict = {}  # buffer name -> dacd.staging.run.Run of the stage under way
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._stopping = threading.Event()
        self._watch = None
        self._thread: threading.Thread | None = None
        #: buffer name or status key -> (why it is skipped, the generation refused): logged once
        self._refused: dict[str, tuple[str, int]] = {}
        self._refusal = f"refused by {host}: "  # how a refusal's status message starts
        #: the pools this host has bricks in, and its claims there: claim key -> buffer name
        self._pools = (
            sorted({b.pool for b in config.hosts[host].bricks}) if host in config.hosts else []
        )
        self._claims: dict[str, str] = {}
        self._held: dict[str, int] = {}  # buffer name -> claim keys it holds on this host
        #: claims in a "together" pool naming another primary: claim key -> buffer name. This
        #: dacd does not act on those buffers (their primary runs every step) and never reads
        #: their spec at a change; only a split stage's plan naming it wakes it (issue 35)
        self._passive: dict[str, str] = {}
        #: buffers woken through this host's work key before its claims' watch told of their
        #: claim (two watches, no order between them): looked at when the claim comes
        self._early: set[str] = set()
        #: pools whose backend runs each step once, on the buffer's primary, for all its hosts
        self._together = {
            p for p in self._pools if runs_once_for_all_hosts(config.pools[p].backend.value)
        }
        self._watches: list = []
        self._threads: list[threading.Thread] = []
        self._resync, self._owed_retry = resync, owed_retry
        self._acted: dict[str, int] = {}  # buffer name -> the spec revision last reconciled
        self._later: dict[str, threading.Timer] = {}  # failed deletes, looked at when due
        self._view: str | None = None  # the mount namespace this dacd sees (stage-views/)
        #: the stages jobs ask for while they run (dacd.staging.injob.InJobStager), or None
        self.injob = injob

    # -- scheduling ----------------------------------------------------------------------------

    def start(self) -> None:
        self._say_view()
        revision = self._list_all()
        self._threads = [
            threading.Thread(target=self._follow, args=(revision,), name="watch-work", daemon=True)
        ]
        self._threads += [
            threading.Thread(
                target=self._follow_claims,
                args=(pool, revision),
                name=f"watch-claims-{pool}",
                daemon=True,
            )
            for pool in self._pools
        ]
        self._threads.append(threading.Thread(target=self._resync_loop, name="resync", daemon=True))
        if self._together:  # what nodes dead at a teardown owe (only these reach nodes)
            self._threads.append(
                threading.Thread(
                    target=retry_owed,
                    args=(
                        self._stopping,
                        self.store,
                        self.config,
                        self.host,
                        self._run_step,
                        self._owed_retry,
                    ),
                    name="owed",
                    daemon=True,
                )
            )
        self._thread = self._threads[0]
        for t in self._threads:
            t.start()

    def _say_view(self) -> None:
        """Which mount namespace this dacd sees filesystems in (`stage-views/<host>`): a
        buffer's primary splits a stage only across servers that see its filesystem where it
        does (dacd/staging/split_primary.py)."""
        from dacd.staging.reach import view

        try:
            self._view = view()
            self.store.put_stage_view(self.host, self._view)
        except (OSError, DacError) as e:
            self._view = None
            log.warning("stages not split across this server: its view not said (%s)", e)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work, let running steps finish (a playbook cut short is re-run at the
        next start anyway)."""
        self._stopping.set()
        with self._lock:
            for timer in self._later.values():
                timer.cancel()
        for w in [self._watch, *self._watches]:
            if w is not None:
                w.close()
        with self._lock:
            for run in self._staging.values():
                run.cancel("stopped: dacd is stopping")  # re-run at the next start
        self._stages.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for t in self._threads:
            t.join(timeout)

    def _list_all(self) -> int:
        """Reconcile every buffer holding a brick of this host; the revision read at."""
        found, revision = self.store.host_claims(self.host, self._pools)
        for key in sorted(k for k, claim in found.items() if claim is None):
            self._log_once(key, f"{printable(key)}: not a brick claim")
        claims = {
            key: name
            for key, claim in found.items()
            if claim is not None and (name := self._works_on(key, claim)) is not None
        }
        passive = {
            key: claim[0] for key, claim in found.items() if claim is not None and key not in claims
        }
        with self._lock:
            self._claims, self._held, self._passive = claims, {}, passive
            for name in claims.values():
                self._held[name] = self._held.get(name, 0) + 1
        for name in set(claims.values()):
            self.schedule(name)
        self._resume_shares(set(passive.values()) - set(claims.values()))
        dropped = self.store.drop_stray_work(self.host, self._pools)
        if dropped:
            log.info(
                "dropped work keys of buffers holding no brick here: %s",
                ", ".join(printable(n) for n in dropped[:10]),
            )
        return revision

    def _works_on(self, key: str, claim: tuple[str, str | None]) -> str | None:
        """The buffer a claim on this host's brick gives this dacd work on: none when the
        pool's steps run on the buffer's primary for all hosts and the claim names another
        primary (a 2,048-brick lustre buffer is 1,000 hosts' claims: 999 dacds would read
        its 160 KB spec at every change only to leave it)."""
        name, primary = claim
        if (
            primary is not None
            and primary != self.host
            and self.store.keys.parse_claim(key)[0] in self._together
        ):
            return None
        return name

    def _resume_shares(self, names: set[str]) -> None:
        """At a start or a relist: the buffers of this host's passive claims (lustre, daos:
        another primary runs their steps) that have a split stage's plan, looked at, so a
        dacd restarted mid-share resumes it. One keys-only read of `stageplans/`, never
        their specs."""
        if not names or self._view is None:
            return
        try:
            planned = set(self.store.stage_plan_buffers()) & names
        except DacError as e:
            log.warning("split stages' plans not looked at (%s); their wake-ups bring them", e)
            return
        for name in sorted(planned):
            self.schedule(name)

    def _passive_holds(self, name: str) -> bool:
        with self._lock:
            return name in self._passive.values()

    def relist(self) -> None:
        """After a new lease (the old one lapsed: steps were fenced meanwhile): look at every
        buffer of this host again."""
        if self._stopping.is_set():
            return
        try:
            self._list_all()
            log.info("registered again with a new lease: looking at every buffer again")
        except DacError as e:
            log.warning(
                "could not list this host's buffers after a new lease (%s); the watches bring them",
                e,
            )

    def _holds(self, name: str) -> bool:
        with self._lock:
            return name in self._held

    def _follow(self, revision: int = 0) -> None:
        """This host's work keys: a put is a change of a spec this host acts on, acted on for
        the buffers it holds claims of. One that comes before its claims' event is not lost:
        the claims' event schedules the buffer too. A delete goes with the spec's (its claims'
        event says so)."""
        while not self._stopping.is_set():
            try:
                self._watch, changes = self.store.watch_host_work(self.host, revision + 1)
                for change in changes:
                    revision = change.revision
                    if change.record is None:
                        continue
                    if self._holds(change.name) or self._passive_holds(change.name):
                        self.schedule(change.name)  # passive: a split stage's plan names it
                    else:  # its claim's event may still be coming: _follow_claims looks then
                        with self._lock:
                            if len(self._early) < EARLY_MAX:
                                self._early.add(change.name)
            except WatchCompacted:
                log.warning("work watch compacted; listing this host's buffers again")
                revision = self._list_all()
            except (StoreUnavailable, InternalError) as e:
                if self._stopping.is_set():
                    return
                metrics.etcd_error("watch", e)
                log.warning("work watch failed (%s); resuming from revision %d", e, revision)
                time.sleep(1)

    def _resync_loop(self) -> None:
        """Now and then: the held buffers whose spec changed since this host last acted on
        it (a work key that never came), and the stray work keys."""
        while not self._stopping.wait(self._resync * random.uniform(0.5, 1.5)):
            try:
                self.resync()
            except DacError as e:
                log.warning("resync failed (%s); trying again later", e)

    def resync(self) -> None:
        with self._lock:
            held = sorted(self._held)
            self._acted = acted = {n: r for n, r in self._acted.items() if n in self._held}
        for name, revision in self.store.spec_revisions(held).items():
            if acted.get(name) != revision:
                self.schedule(name)
        self.store.drop_stray_work(self.host, self._pools)

    def _follow_claims(self, pool: str, revision: int) -> None:
        """Claims made and released on this host's bricks in `pool`: a buffer arriving is
        reconciled at once; one leaving is looked at once more (its spec may be gone)."""
        while not self._stopping.is_set():
            try:
                watch, changes = self.store.watch_host_claims(self.host, pool, revision + 1)
                self._watches.append(watch)
                for change in changes:
                    revision = change.revision
                    if change.bad:  # it holds no brick for any buffer: counted as used only
                        self._log_once(change.name, f"{printable(change.name)}: not a brick claim")
                    elif change.record is None:
                        self._refused.pop(change.name, None)
                    with self._lock:
                        self._passive.pop(change.name, None)
                        old = self._claims.pop(change.name, None)
                        if old is not None:
                            self._held[old] -= 1
                            if not self._held[old]:
                                del self._held[old]
                        new = (
                            None
                            if change.record is None
                            else self._works_on(change.name, change.record)
                        )
                        woken = None
                        if change.record is not None:
                            if change.record[0] in self._early:
                                self._early.discard(change.record[0])
                                woken = change.record[0]
                        if new is not None:
                            self._claims[change.name] = new
                            self._held[new] = self._held.get(new, 0) + 1
                        elif change.record is not None:
                            self._passive[change.name] = change.record[0]
                    for name in {n for n in (old, new, woken) if n is not None}:
                        self.schedule(name)
            except WatchCompacted:
                log.warning("claim watch compacted; listing this host's buffers again")
                revision = self._list_all()
            except (StoreUnavailable, InternalError) as e:
                if self._stopping.is_set():
                    return
                metrics.etcd_error("watch", e)
                log.warning("claim watch failed (%s); resuming from revision %d", e, revision)
                time.sleep(1)

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
                self.reconcile(name)
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

    # -- one buffer ----------------------------------------------------------------------------

    def reconcile(self, name: str) -> None:
        """Take steps for `name` until this host has nothing left to do for it."""
        while not self._stopping.is_set():
            current = self.store.buffer_text(name)
            if current is None:
                metrics.buffer_gone(name)
                self._refused.pop(name, None)
                with self._lock:
                    self._acted.pop(name, None)
                return
            (key, text), mod_revision, incarnation = current
            with self._lock:
                self._acted[name] = mod_revision
            try:
                buf = parse_buffer(key, text, self.config)
            except Untrusted as e:
                self._refuse(name, str(e), text, incarnation)
                return
            hosts = buf.allocation.hosts
            if self.host not in hosts:
                return
            with self._lock:
                run = self._staging.get(name)
            if run is not None:  # the stage's thread schedules the buffer again when it ends
                if buf.desired_state is State.DELETED:
                    run.cancel("stopped: the buffer is being torn down")
                return
            if (
                buf.desired_state is State.DELETED
                and self.injob is not None
                and self.host == buf.allocation.primary_host
                and not buf.persistent
            ):  # teardown: what the job's stages left running stops (scancel --hurry too)
                self.injob.torn_down(name)
            backend = self.config.pools[buf.request.pool].backend.value  # parse_buffer checked
            together = runs_once_for_all_hosts(backend)
            if together and self.host != buf.allocation.primary_host:
                # the primary runs every step for this buffer's hosts; this dacd is here only
                # when a split stage's plan woke it: its shares, if any (issue 35)
                if buf.desired_state in (State.STAGED_IN, State.STAGED_OUT) and len(hosts) > 1:
                    try:
                        mine = self._statuses(name).get(self.host)
                    except Untrusted as e:
                        self._log_once(name, str(e))
                        return
                    self._share_due(buf, incarnation, mine, backend)
                return
            try:
                statuses = self._statuses(name)
            except Untrusted as e:
                self._refuse(name, str(e), None, incarnation)
                return
            self._refused.pop(name, None)
            mine = statuses.get(self.host)
            if mine and mine.error and mine.error.message.startswith(self._refusal):
                # the record was refused and is sane now: carry on where it was
                mine = mine.model_copy(update={"error": None, "generation": buf.generation})
                self.store.put_status(mine, incarnation)
            metrics.buffer_seen(buf, self.host, mine)
            failed = mine.generation if mine and mine.error else None
            if (
                buf.desired_state is State.DELETED
                and mine is not None
                and failed is not None
                and failed >= buf.generation
                and self._not_due(name, mine)
            ):
                return  # a failed delete runs again when due, not in a loop (issue 45)
            attached = mine.attached if mine else {}
            nxt = next_step(
                buf.desired_state,
                mine.state if mine else None,
                failed,
                buf.generation,
                mounts_match=attached == buf.attachments,
            )
            if nxt is None:
                if not together and self._share_due(buf, incarnation, mine, backend):
                    return  # the share's thread schedules the buffer again when it ends
                self._reap_if_gone(buf, mod_revision, statuses, hosts)
                return
            step, target = nxt
            if step in ("stage_in", "stage_out") and self.host == buf.allocation.primary_host:
                self._hand_off(
                    buf,
                    incarnation,
                    mine,
                    step,
                    target,
                    backend,
                    hosts if together else [self.host],
                )
                return
            self._step(
                buf, incarnation, mine, step, target, backend, hosts if together else [self.host]
            )

    def _not_due(self, name: str, mine: Status) -> bool:
        """Whether this host's failed delete of `name` is not due to run again yet
        (`retry_after`); if so, the buffer is looked at again when it is."""
        wait = mine.updated_at + retry_after(mine.attempt) - time.time()
        if wait <= 0:
            return False
        with self._lock:
            if name in self._later or self._stopping.is_set():
                return True
            timer = threading.Timer(wait, self._due, (name,))
            timer.daemon = True
            self._later[name] = timer
        timer.start()
        return True

    def _due(self, name: str) -> None:
        with self._lock:
            self._later.pop(name, None)
        if not self._stopping.is_set():
            self.schedule(name)

    def _statuses(self, name: str) -> dict[str, Status]:
        """The buffer's statuses, each checked: another host's bad one counts as absent (it
        can only hold back the final reap), this host's own is Untrusted (its state decides
        whether to make a filesystem)."""
        out = {}
        for host, (key, text) in self.store.status_texts(name).items():
            try:
                status = Status.model_validate_json(text)
                if (status.buffer, status.host) != (name, host):
                    raise ValueError(f"names {shown(status.buffer)}/{shown(status.host)}")
            except ValueError as e:  # pydantic's ValidationError is one
                why = f"{key}: not a valid status: {shown(str(e).splitlines()[0], 120)}"
                if host == self.host:
                    raise Untrusted(why) from None
                self._log_once(key, why)
                continue
            out[host] = status
        return out

    def _log_once(self, key: str, why: str, generation: int = 0) -> bool:
        """Log `why` unless it was the last word on `key`; True when `key` is newly refused
        or refused at a new generation (a writer changed the record, still badly)."""
        last = self._refused.get(key)
        if last is None or last[0] != why:
            log.error("skipping %s (until the record changes)", why)
        self._refused[key] = (why, generation)
        return last != (why, generation)

    def _refuse(self, name: str, why: str, text: bytes | str | None, incarnation: int) -> None:
        """Log once and skip; tell the waiting Slurm call why, in this host's status, when
        the record (`text`: the spec) names this host under a sane buffer name. This host's
        own status, when that is what is bad, is left for an admin to look at."""
        generation = _generation(text) if text is not None else 0
        if (
            not self._log_once(name, why, generation)
            or text is None
            or not re.match(BUFFER_NAME, name)
            or self.host not in _named_hosts(text)
        ):
            return
        try:
            mine = self._statuses(name).get(self.host)
        except Untrusted:
            return
        fields = (
            mine.model_dump(exclude={"error", "generation", "updated_at"})
            if mine
            else {"buffer": name, "host": self.host}
        )
        self.store.put_status(
            Status(
                **fields,
                generation=generation,
                updated_at=time.time(),
                error=StatusError(category=Kind.ADMIN, message=f"{self._refusal}{why}"),
            ),
            incarnation,
        )

    def _hand_off(
        self, buf, incarnation: int, mine, step: str, target: State, backend: str, hosts: list[str]
    ) -> None:
        """The stage to the stage pool; the buffer is looked at again when it ends."""
        from dacd.staging.run import Run

        run = Run()
        with self._lock:
            self._staging[buf.name] = run

        def stage() -> None:
            try:
                self._step(buf, incarnation, mine, step, target, backend, hosts, run)
            except (Fenced, Superseded) as e:  # schedule() below looks at the buffer afresh
                log.warning("buffer %s: %s not recorded: %s", buf.name, step, e)
            except Exception:  # noqa: BLE001 - a stage's thread must never die silently
                log.exception("buffer %s: %s failed", buf.name, step)
            finally:
                with self._lock:
                    del self._staging[buf.name]
                self.schedule(buf.name)

        try:
            self._stages.submit(stage)
        except RuntimeError:  # shutting down
            with self._lock:
                del self._staging[buf.name]

    def _step(
        self,
        buf,
        incarnation: int,
        mine: Status | None,
        step: str,
        target: State,
        backend_name: str,
        hosts: list[str],
        run=None,
    ) -> None:
        """Run `step`, recording its progress and outcome in the status of each of `hosts`,
        of this incarnation of the buffer only (Superseded ends the step otherwise)."""
        name, reached = buf.name, mine.state if mine else None
        attached = mine.attached if mine else {}
        attempt = (mine.attempt + 1) if mine and mine.step == step else 1
        progress = [mine.progress if mine else None]  # the last staging progress stays shown
        share = [mine.share if mine else None]  # a split stage's shares done here
        #: a stage of a lustre or daos buffer on several servers: the other hosts' progress
        #: and share reports are their own dacds' (a split stage's shares, issue 35), so this
        #: primary's progress lines go to its own status alone, and its outcome keeps theirs
        staged_apart = step in ("stage_in", "stage_out") and len(hosts) > 1
        if step in ("stage_in", "stage_out") and self.host != buf.allocation.primary_host:
            progress[0] = None  # what a share copies here now is shown, not the last stage's

        def status(line: bool = False, **fields) -> None:
            values = dict(
                buffer=name,
                state=reached,
                generation=buf.generation,
                step=step,
                attached=attached,
                attempt=attempt,
                progress=progress[0],
                updated_at=time.time(),
                share=share[0],
            )
            values.update(fields)
            if staged_apart:
                own = Status(host=self.host, **values)
                if line:
                    self.store.put_status(own, incarnation)
                    return
                try:
                    theirs = self._statuses(name)
                except Untrusted:  # this host's own is bad: the outcome is written over it
                    theirs = {}
                self.store.put_statuses(
                    [own]
                    + [
                        Status(
                            host=host,
                            **{
                                **values,
                                "progress": theirs[host].progress if host in theirs else None,
                                "share": theirs[host].share if host in theirs else None,
                            },
                        )
                        for host in hosts
                        if host != self.host
                    ],
                    incarnation,
                )
            elif len(hosts) == 1:
                self.store.put_status(Status(host=hosts[0], **values), incarnation)
            else:
                self.store.put_statuses(
                    [Status(host=host, **values) for host in hosts], incarnation
                )

        def shown(**fields) -> None:
            """A progress line (the task running, bytes staged): shown when etcd takes it. One
            etcd would not take (out of reach past etcd.timeout, restarting) must not fail a
            step that is going well; the step's outcome is written with status(), which
            raises, and a lapsed lease still stops the step (Fenced)."""
            try:
                status(True, **fields)
            except StoreUnavailable as e:
                log.warning("buffer %s: %s progress not shown (%s)", name, step, e)

        status()
        log.info("buffer %s (job %s): %s on %s", name, buf.job_id, step, self.host)
        started, backend = time.monotonic(), None
        try:
            backend = get_backend(backend_name, self.config, self.host)
            if step in ("stage_in", "stage_out"):
                if self.host == buf.allocation.primary_host:

                    def on_progress(p: dict) -> None:
                        progress[0] = Progress(**p)
                        shown()

                    def on_share(report) -> None:
                        share[0] = report
                        shown()

                    self._stage(
                        buf, step, backend, on_progress, run, (incarnation, attempt, mine, on_share)
                    )
            else:
                self._run_step(
                    backend.name,
                    step,
                    self.host,
                    backend.variables(buf, step, attached),
                    lambda task: shown(step=f"{step}: {task}"),
                    inventory=backend.inventory(buf, step, attached),
                    forks=self.config.ansible_forks,
                    ssh=self.config.ssh,
                )
        except (Fenced, Superseded):
            raise  # nothing may be written: the next lease's pass runs the step again, and
            # a buffer deleted or created anew is looked at afresh
        except Exception as e:  # noqa: BLE001 - every failure must reach the waiting Slurm call
            if not isinstance(e, DacError):
                log.exception("buffer %s (job %s): %s failed", name, buf.job_id, step)
                e = InternalError(f"{step} failed on {self.host}: {type(e).__name__}: {e}")
            message = printable(str(e))  # a path in it may hold any byte (daccore/escape.py)
            log.error("buffer %s (job %s): %s", name, buf.job_id, message)
            metrics.step_finished(step, backend, started, e)
            if (
                step == "delete"
                and backend is not None
                and leave_owed(self.store, self.config, self.host, buf, backend, attached, e)
            ):
                status(state=target, step="", error=None, attached={})  # the nodes owe the rest
                return
            if step in ("mount", "unmount", "delete"):
                # what a failed step may have mounted is what the next step unmounts
                attached = may_be_attached(attached, buf.attachments, e)
            elif step == "create" and backend is not None and backend.one_run_for_all_hosts:
                self._undo_create(buf, backend)
            status(
                error=StatusError(
                    category=e.kind, message=message, detail=getattr(e, "output", "")[-8000:]
                )
            )
            return
        metrics.step_finished(step, backend, started)
        # mount and unmount make the mounts match the spec; delete removes every one
        if step in ("mount", "unmount"):
            attached = buf.attachments
        elif step == "delete":
            attached = {}
        status(state=target, step="", error=None)

    def _undo_create(self, buf, backend) -> None:
        """A create that failed on one server stops everywhere (any_errors_fatal); what the
        others built is taken down at once, not left for Slurm's teardown (which runs delete
        again: it is idempotent)."""
        try:
            self._run_step(
                backend.name,
                "delete",
                self.host,
                backend.variables(buf, "delete"),
                None,
                inventory=backend.inventory(buf, "delete", {}),
                forks=self.config.ansible_forks,
                ssh=self.config.ssh,
            )
            log.info(
                "buffer %s (job %s): what the failed create built is removed", buf.name, buf.job_id
            )
        except (Fenced, Superseded):
            raise
        except Exception as e:  # noqa: BLE001 - teardown runs delete again
            log.error(
                "buffer %s (job %s): removing what the failed create built: %s",
                buf.name,
                buf.job_id,
                printable(str(e)),
            )

    def _stage(self, buf, step: str, backend, on_progress, run, split_by=None) -> None:
        """Staging runs on the primary host, which has the filesystem mounted; progress goes
        to the status at most once a second (the copier's own pace). A buffer of several
        servers that see the primary's filesystem is split across their dacds (issue 35:
        `split_by` is (incarnation, attempt, this host's status, on_share))."""
        from dacd.staging.run import Run, stage, time_limit

        fs_path = backend.variables(buf, step)["fs_path"]
        run = run or Run()
        injob = step == "stage_out" and self.injob is not None and not buf.persistent
        if injob:  # the job's own stages still running end first (dacd/staging/injob.py)
            self.injob.before_stage_out(buf, run)
        args = (buf, step.removeprefix("stage_"), fs_path, self.config.stage_workers, on_progress)
        limit = time_limit(self.config.stage_timeout)
        split = int(os.environ.get("DAC_STAGE_SPLIT") or 0)  # tests and bench only: every
        if split > 1:  # stage split across that many copiers here (dacd/staging/split.py)
            from dacd.staging.split import split_here

            split_here(*args, limit, run, split)
        elif split_by is not None and len(owners := self._split_owners(buf, backend)) > 1:
            from dacd.staging.split_primary import Across

            incarnation, attempt, mine, on_share = split_by
            Across(
                self.store,
                self.host,
                buf,
                step,
                fs_path,
                self.config.stage_workers,
                owners,
                attempt,
                incarnation,
                mine,
                on_progress,
                on_share,
                limit,
                run,
            ).stage()
        else:
            stage(*args, limit, run)
        if injob:  # then those it asked to run at its end, in order
            self.injob.at_job_end(buf, run)

    def _reap_if_gone(self, buf, mod_revision: int, statuses: dict, hosts: list[str]) -> None:
        everywhere = all(statuses.get(h) and statuses[h].state is State.DELETED for h in hosts)
        if (
            buf.desired_state is State.DELETED
            and everywhere
            and self.host != buf.allocation.primary_host
        ):
            self.store.wake(buf.allocation.primary_host, buf.name)  # done last: the primary reaps
            return
        if (
            buf.desired_state is State.DELETED
            and everywhere
            and self.host == buf.allocation.primary_host
        ):
            try:
                if len(hosts) > 1:  # a split stage's plans (only kept if it failed)
                    self.store.drop_stage_plans(buf.name, self.host)
                self.store.delete_buffer(buf.name, mod_revision)
                log.info("buffer %s (job %s): deleted, bricks released", buf.name, buf.job_id)
            except Conflict:
                self.schedule(buf.name)  # the spec moved on meanwhile: look again


def may_be_attached(
    attached: dict[str, list[str]], wanted: dict[str, list[str]], error: Exception
) -> dict[str, list[str]]:
    """What a failed mount, unmount or delete may have left mounted: what was mounted before,
    and every node the spec attaches, except nodes that never answered in the step (they ran
    none of its tasks). Recorded as attached, so the next step unmounts them."""
    silent = set(getattr(error, "hosts", ())) - set(getattr(error, "touched", ()))
    out = {job: list(nodes) for job, nodes in attached.items()}
    for job, nodes in wanted.items():
        merged = out.setdefault(job, [])
        merged += [n for n in nodes if n not in silent and n not in merged]
    return {job: nodes for job, nodes in out.items() if nodes}


def _named_hosts(text: bytes | str) -> set[str]:
    """The hosts a refused record's allocation names, as far as it can be read."""
    try:
        bricks = json.loads(text)["allocation"]["bricks"]
        return {b["host"] for b in bricks if isinstance(b.get("host"), str)}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return set()


def _generation(text: bytes | str) -> int:
    """A refused record's generation where it is a sane one (the Slurm side compares it)."""
    try:
        g = json.loads(text)["generation"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return 0
    return g if type(g) is int and 0 <= g < 2**63 else 0
