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

The parts are in dacd/reconcile/ (its __init__ lists them): the intake decides which buffers to
look at and when, a buffer's pass what to do for it, a step runner runs the step and records it;
`Reconciler` below builds them, hands each the others' state it needs, starts and stops them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from dacd.owed import RETRY as OWED_RETRY
from dacd.owed import retry_owed
from dacd.reconcile.buffer_pass import BufferPass
from dacd.reconcile.claims import Claims
from dacd.reconcile.intake import Intake
from dacd.reconcile.refusals import Refusals
from dacd.reconcile.stages import StagePool
from dacd.reconcile.step import StepRunner
from dacd.staging.shares import SplitShares

if TYPE_CHECKING:
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from dacd.staging.injob import InJobStager

__all__ = ["Reconciler", "RESYNC"]

#: Seconds between two looks at the revisions of the specs this host works on (each spread
#: by +-50 % so that a site's dacds started together do not look together): one keys-only
#: read a dacd, a spec read only for a buffer changed unseen.
RESYNC = 600.0


class Reconciler:
    """This host's buffers driven toward their desired state (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        config: DacConfig,
        host: str,
        run_step: Callable[..., None] | None = None,
        resync: float = RESYNC,
        owed_retry: float = OWED_RETRY,
        injob: InJobStager | None = None,
    ) -> None:
        from dacd.runner import run_step as default_run

        self.store, self.config, self.host = store, config, host
        #: the stages jobs ask for while they run (dacd.staging.injob.InJobStager), or None
        self.injob = injob
        self._run_step = run_step or default_run
        self._owed_retry = owed_retry
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        refusals = Refusals(store, host)
        self._claims = Claims(store, config, host)
        self._stages = StagePool(config.concurrency, self.schedule)
        self._shares = SplitShares(store, config, host, self._stages, refusals.log_once)
        steps = StepRunner(
            store, config, host, self._run_step, injob, refusals.statuses, self._shares.owners
        )
        self._pass = BufferPass(
            store,
            config,
            host,
            injob=injob,
            stopping=self._stopping,
            refusals=refusals,
            stages=self._stages,
            shares=self._shares,
            steps=steps,
            schedule=self.schedule,
            acted=self._claims.acted,
        )
        self._intake = Intake(
            store,
            host,
            self._claims,
            refusals,
            self._pass.reconcile,
            self._shares.planned,
            workers=config.concurrency,
            stopping=self._stopping,
            resync=resync,
        )

    def start(self) -> None:
        self._shares.say_view()
        self._intake.start()
        if self._claims.together:  # what nodes dead at a teardown owe (only these reach nodes)
            self._threads = [
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
            ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work, let running steps finish (a playbook cut short is re-run at the
        next start anyway)."""
        self._stopping.set()
        self._pass.stop()
        self._intake.close()
        self._stages.stop()
        self._intake.shutdown()
        for t in [*self._intake.threads, *self._threads]:
            t.join(timeout)

    def relist(self) -> None:
        """After a new lease (the old one lapsed: steps were fenced meanwhile): look at every
        buffer of this host again."""
        self._intake.relist()

    def resync(self) -> None:
        """The held buffers whose spec changed unseen looked at; stray work keys dropped."""
        self._intake.resync()

    def schedule(self, name: str) -> None:
        """`name` looked at by a worker (once more after its pass, if one is under way)."""
        self._intake.schedule(name)

    def reconcile(self, name: str) -> None:
        """Take steps for `name` until this host has nothing left to do for it."""
        self._pass.reconcile(name)
