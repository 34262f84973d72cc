"""What one buffer's reconcile does on this host: read its spec and statuses, each checked (a
record that breaks a rule is refused: dacd/reconcile/refusals.py), ask
`daccore.records.lifecycle.next_step`, take the step (a stage to the stage pool), and repeat
until this host has nothing left to do for the buffer. When every host of a buffer has reached
DELETED, the primary host's dacd removes the spec, the statuses and the claims.

A pass looks first (`_look`): whether the buffer is this host's to act on now, or in other hands
(a stage under way, another primary running every step); then acts (`_act`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, NamedTuple

from daccore.backends import runs_once_for_all_hosts
from daccore.errors import Conflict, Fenced, Superseded
from daccore.records.lifecycle import next_step, retry_after
from daccore.records.models import Buffer, State, Status
from daccore.rules.trust import Untrusted, parse_buffer
from dacd import metrics
from dacd.reconcile.step_status import STAGE_STEPS

if TYPE_CHECKING:
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from dacd.reconcile.refusals import Refusals
    from dacd.reconcile.stages import StagePool
    from dacd.reconcile.step import StepRunner
    from dacd.staging.injob import InJobStager
    from dacd.staging.shares import SplitShares

log = logging.getLogger("dacd.reconciler")  # the reconciler's lines, whichever part says them

__all__ = ["BufferPass"]


class Spec(NamedTuple):
    """A buffer's spec as one pass read it, checked."""

    buf: Buffer
    mod_revision: int
    incarnation: int


class Look(NamedTuple):
    """A buffer this host acts on now: its spec, its backend, whether that backend runs each
    step once for all hosts (on the primary), and its statuses, this host's (`mine`) too."""

    spec: Spec
    backend: str
    together: bool
    statuses: dict[str, Status]
    mine: Status | None


class BufferPass:
    """One buffer's reconcile on this host (see the module's docstring). `schedule(name)`
    looks at a buffer again; `acted(name, revision)` is told each spec revision read (None:
    the spec is gone), for the resync to compare."""

    def __init__(
        self,
        store: Store,
        config: DacConfig,
        host: str,
        *,
        injob: InJobStager | None,
        stopping: threading.Event,
        refusals: Refusals,
        stages: StagePool,
        shares: SplitShares,
        steps: StepRunner,
        schedule: Callable[[str], None],
        acted: Callable[[str, int | None], None],
    ) -> None:
        self._store, self._config, self._host, self._injob = store, config, host, injob
        self._stopping, self._refusals = stopping, refusals
        self._stages, self._shares, self._steps = stages, shares, steps
        self._schedule, self._acted = schedule, acted
        self._lock = threading.Lock()
        self._later: dict[str, threading.Timer] = {}  # failed deletes, looked at when due

    def reconcile(self, name: str) -> None:
        """Take steps for `name` until this host has nothing left to do for it: the spec is
        read again after each step run here."""
        again = True
        while again and not self._stopping.is_set():
            spec = self._read(name)
            look = self._look(spec) if spec is not None else None
            again = look is not None and self._act(look)

    def stop(self) -> None:
        """No failed delete looked at again when due: the next start looks at every buffer."""
        with self._lock:
            for timer in self._later.values():
                timer.cancel()

    def _read(self, name: str) -> Spec | None:
        """The buffer's spec, checked; None when it is gone, refused, or names other hosts."""
        current = self._store.buffer_text(name)
        if current is None:
            metrics.buffer_gone(name)
            self._refusals.forget(name)
            self._acted(name, None)
            return None
        (key, text), mod_revision, incarnation = current
        self._acted(name, mod_revision)
        try:
            buf = parse_buffer(key, text, self._config)
        except Untrusted as e:
            self._refusals.refuse(name, str(e), text, incarnation)
            return None
        return Spec(buf, mod_revision, incarnation) if self._host in buf.allocation.hosts else None

    def _look(self, spec: Spec) -> Look | None:
        """The buffer as this host acts on it now; None when it is in other hands (a stage
        under way, the primary of a buffer whose steps it runs for all hosts) or this host's
        status is refused."""
        buf, incarnation = spec.buf, spec.incarnation
        if self._stage_under_way(buf):
            return None  # the stage's thread schedules the buffer again when it ends
        primary = self._host == buf.allocation.primary_host
        if (
            buf.desired_state is State.DELETED
            and self._injob is not None
            and primary
            and not buf.persistent
        ):  # teardown: what the job's stages left running stops (scancel --hurry too)
            self._injob.torn_down(buf.name)
        backend = self._config.pools[buf.request.pool].backend.value  # parse_buffer checked
        together = runs_once_for_all_hosts(backend)
        if together and not primary:
            self._shares_only(buf, incarnation, backend)
            return None
        try:
            statuses = self._refusals.statuses(buf.name)
        except Untrusted as e:
            self._refusals.refuse(buf.name, str(e), None, incarnation)
            return None
        mine = self._refusals.accepted(buf, statuses.get(self._host), incarnation)
        metrics.buffer_seen(buf, self._host, mine)
        return Look(spec, backend, together, statuses, mine)

    def _act(self, look: Look) -> bool:
        """This host's next step for the buffer: True when it ran here (read the spec again),
        False when there is none now or it runs elsewhere (its thread looks again)."""
        buf, incarnation, mine = look.spec.buf, look.spec.incarnation, look.mine
        failed = mine.generation if mine and mine.error else None
        if (
            buf.desired_state is State.DELETED
            and mine is not None
            and failed is not None
            and failed >= buf.generation
            and self._not_due(buf.name, mine)
        ):
            return False  # a failed delete runs again when due, not in a loop (issue 45)
        attached = mine.attached if mine else {}
        nxt = next_step(
            buf.desired_state,
            mine.state if mine else None,
            failed,
            buf.generation,
            mounts_match=attached == buf.attachments,
        )
        if nxt is None:  # a split stage's shares here (their thread looks again), or the reap
            if look.together or not self._shares.due(buf, incarnation, mine, look.backend):
                self._reap_if_gone(look)
            return False
        step, target = nxt
        hosts = buf.allocation.hosts if look.together else [self._host]
        if step in STAGE_STEPS and self._host == buf.allocation.primary_host:
            self._hand_off(buf, incarnation, mine, step, target, look.backend, hosts)
            return False  # the stage's thread schedules the buffer again when it ends
        self._steps.run(buf, incarnation, mine, step, target, look.backend, hosts)
        return True

    def _stage_under_way(self, buf: Buffer) -> bool:
        """Whether the buffer has a stage under way here; it is stopped if the buffer is
        being torn down (its copiers killed at once, so teardown frees its bricks)."""
        run = self._stages.running(buf.name)
        if run is not None and buf.desired_state is State.DELETED:
            run.cancel("stopped: the buffer is being torn down")
        return run is not None

    def _shares_only(self, buf: Buffer, incarnation: int, backend: str) -> None:
        """The primary runs every step for this buffer's hosts; this dacd is here only when
        a split stage's plan woke it: its shares, if any (issue 35)."""
        if buf.desired_state not in (State.STAGED_IN, State.STAGED_OUT):
            return
        if len(buf.allocation.hosts) < 2:  # no stage split: the primary's alone
            return
        try:
            mine = self._refusals.statuses(buf.name).get(self._host)
        except Untrusted as e:
            self._refusals.log_once(buf.name, str(e))
            return
        self._shares.due(buf, incarnation, mine, backend)

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
            self._schedule(name)

    def _hand_off(
        self,
        buf: Buffer,
        incarnation: int,
        mine: Status | None,
        step: str,
        target: State,
        backend: str,
        hosts: list[str],
    ) -> None:
        """The stage to the stage pool; the buffer is looked at again when it ends."""
        from dacd.staging.run import Run

        run = Run()

        def stage() -> bool:
            try:
                self._steps.run(buf, incarnation, mine, step, target, backend, hosts, run)
            except (Fenced, Superseded) as e:  # looked at afresh when the stage ends
                log.warning("buffer %s: %s not recorded: %s", buf.name, step, e)
            except Exception:  # noqa: BLE001 - a stage's thread must never die silently
                log.exception("buffer %s: %s failed", buf.name, step)
            return True

        self._stages.hand_off(buf.name, run, stage)

    def _reap_if_gone(self, look: Look) -> None:
        """Once every host of a torn-down buffer reached DELETED: the primary removes the
        spec, the statuses and the claims (the bricks are free again); another host wakes
        the primary, done last."""
        buf, statuses, hosts = look.spec.buf, look.statuses, look.spec.buf.allocation.hosts
        everywhere = all(statuses.get(h) and statuses[h].state is State.DELETED for h in hosts)
        if buf.desired_state is not State.DELETED or not everywhere:
            return
        if self._host != buf.allocation.primary_host:
            self._store.wake(buf.allocation.primary_host, buf.name)  # done last: the primary reaps
            return
        try:
            if len(hosts) > 1:  # a split stage's plans (only kept if it failed)
                self._store.drop_stage_plans(buf.name, self._host)
            self._store.delete_buffer(buf.name, look.spec.mod_revision)
            log.info("buffer %s (job %s): deleted, bricks released", buf.name, buf.job_id)
        except Conflict:
            self._schedule(buf.name)  # the spec moved on meanwhile: look again
