"""A split stage's shares as this dacd takes part in them (issue 35): which servers the primary
shares a stage with, and, on another server, the shares of a plan it owns handed to the stage
pool and reported in its own status. The primary's side of the stage (the lead, the plan's
record, the take-over, the finish) is `Across` in dacd/staging/split_primary.py, the shares'
copying `run_owned` in dacd/staging/split_owners.py; the proof and the rules of who reaches a
filesystem are dacd/staging/reach.py.

`SplitShares` is a part the reconciler holds and calls (dacd/reconciler.py), kept apart so
that the lifecycle's modules hold the lifecycle: it is handed what it uses, the store, host and
config, the stage pool with its table of running stages (dacd/reconcile/stages.py), and how a
bad record is logged; it keeps the mount namespace this dacd sees, said at start.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from daccore.backends import get as get_backend
from daccore.errors import DacError, Fenced, StoreUnavailable, Superseded
from daccore.records.models import Buffer, State, Status
from daccore.rules.trust import shown

if TYPE_CHECKING:
    from daccore.backends.base import Backend
    from daccore.records.models import ShareReport, StagePlan
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from dacd.reconcile.stages import StagePool

log = logging.getLogger("dacd.reconciler")

__all__ = ["SplitShares"]


class SplitShares:
    """The reconciler's part in split stages (see the module's docstring); `log_once(key,
    why)` logs a bad record once (dacd/reconcile/refusals.py)."""

    def __init__(
        self,
        store: Store,
        config: DacConfig,
        host: str,
        stages: StagePool,
        log_once: Callable[[str, str], object],
    ) -> None:
        self._store, self._config, self._host = store, config, host
        self._stages, self._log_once = stages, log_once
        self.view: str | None = None  # the mount namespace this dacd sees (stage-views/)

    def say_view(self) -> None:
        """Which mount namespace this dacd sees filesystems in (`stage-views/<host>`): a
        buffer's primary splits a stage only across servers that see its filesystem where it
        does (dacd/staging/split_primary.py)."""
        from dacd.staging.reach import view

        try:
            self.view = view()
            self._store.put_stage_view(self._host, self.view)
        except (OSError, DacError) as e:
            self.view = None
            log.warning("stages not split across this server: its view not said (%s)", e)

    def planned(self, names: set[str]) -> list[str]:
        """Of `names`, the buffers of this host's passive claims (lustre, daos: another
        primary runs their steps), those that have a split stage's plan: looked at at a start
        or a relist, so a dacd restarted mid-share resumes it. One keys-only read of
        `stageplans/`, never their specs."""
        if not names or self.view is None:
            return []
        try:
            planned = set(self._store.stage_plan_buffers()) & names
        except DacError as e:
            log.warning("split stages' plans not looked at (%s); their wake-ups bring them", e)
            return []
        return sorted(planned)

    def owners(self, buf: Buffer, backend: Backend) -> list[str]:
        """The servers a stage of `buf` is split across, this primary first: those of its
        hosts whose dacd is alive and reaches the buffer's filesystem where this one does
        (`reaches` in dacd/staging/reach.py, by the backend's `split_reach`: a local buffer's
        servers must share this dacd's mount namespace, a lustre buffer's mount its client;
        a daos buffer's never split; each proves it at copy time). One (no split) for a
        buffer on one server, or whose other servers cannot reach it."""
        from dacd.staging.reach import reaches, split_reach

        hosts = buf.allocation.hosts
        if len(hosts) < 2 or self.view is None:
            return [self._host]
        reach = split_reach(backend)
        if reach == "none":
            return [self._host]
        views = self._store.stage_views(hosts)
        alike = [h for h in hosts if h != self._host and reaches(self.view, views.get(h), reach)]
        alive = self._store.alive_among(alike) if alike else set()
        return [self._host] + [h for h in alike if h in alive]

    def due(self, buf: Buffer, incarnation: int, mine: Status | None, backend: str) -> bool:
        """A split stage's shares this host owns and has not reported (`run_owned` in
        dacd/staging/split_owners.py): handed to the stage pool, True; False when there are
        none. The record is checked (one writer: the primary), and its filesystem must be the
        primary's as this dacd's config places it."""
        from daccore.records.models import StagePlan
        from dacd.staging.split import answers

        primary = buf.allocation.primary_host
        if (
            self._host == primary
            or len(buf.allocation.hosts) < 2
            or buf.desired_state not in (State.STAGED_IN, State.STAGED_OUT)
            or self.view is None
        ):
            return False
        step = "stage_in" if buf.desired_state is State.STAGED_IN else "stage_out"
        found = self._store.stage_plan_text(buf.name, step)
        if found is None:
            return False
        key, text = found
        try:
            plan = StagePlan.model_validate_json(text)
            fs_path = get_backend(backend, self._config, primary).variables(buf, step)["fs_path"]
            if (plan.buffer, plan.primary, plan.fs_path) != (buf.name, primary, fs_path):
                raise ValueError(f"names {shown(plan.primary)}:{shown(plan.fs_path)}")
        except ValueError as e:  # pydantic's ValidationError is one
            self._log_once(key, f"{key}: not a valid stage plan: {shown(str(e).splitlines()[0])}")
            return False
        if plan.generation != buf.generation or plan.failed:
            return False
        report = mine.share if mine and answers(mine.share, plan) else None
        if report is not None and (report.failed or report.unreached):
            return False  # said once for this plan: the primary gives its shares to others
        done = report.done if report is not None else []
        todo = [i for i in plan.owned_by(self._host) if i not in done]
        if not todo:
            return False
        self._hand_off(buf, incarnation, mine, plan, todo, fs_path, report)
        return True

    def _hand_off(
        self,
        buf: Buffer,
        incarnation: int,
        mine: Status | None,
        plan: StagePlan,
        todo: list[int],
        fs_path: str,
        report: ShareReport | None,
    ) -> None:
        """This host's shares of a split stage to the stage pool, as the user, reported in
        this host's own status; the buffer is looked at again when they end. Nothing else
        writes this status meanwhile: reconcile leaves a buffer alone while its stage runs."""
        from daccore.records.models import ShareReport
        from dacd.staging.run import Run, time_limit
        from dacd.staging.split_owners import run_owned

        run = Run()
        base = mine or Status(buffer=buf.name, host=self._host)
        report = report or ShareReport(
            step=plan.step, generation=plan.generation, attempt=plan.attempt
        )

        def write(now: ShareReport, step: str) -> None:
            status = base.model_copy(
                update={
                    "progress": None,  # the stage's is the primary's: the shares' sum
                    "share": now,
                    "step": step,
                    "updated_at": time.time(),
                }
            )
            try:
                self._store.put_status(status, incarnation)
            except StoreUnavailable as e:  # a progress line: the report is written again
                log.warning("buffer %s: share progress not shown (%s)", buf.name, e)

        def shares() -> bool:
            log.info(
                "buffer %s (job %s): %s shares %s on %s",
                buf.name,
                buf.job_id,
                plan.step,
                ",".join(map(str, todo)),
                self._host,
            )
            try:
                run_owned(
                    self._store,
                    self._host,
                    buf,
                    plan,
                    todo,
                    fs_path,
                    self._config.stage_workers,
                    time_limit(self._config.stage_timeout),
                    run,
                    report,
                    write,
                )
            except (Fenced, Superseded) as e:  # a new lease's relist brings the buffer back
                log.warning("buffer %s: %s shares not recorded: %s", buf.name, plan.step, e)
                return False
            except Exception:  # noqa: BLE001 - a stage's thread must never die silently
                log.exception("buffer %s: %s shares failed", buf.name, plan.step)
                return False  # not at once: the next change of the buffer, or resync
            # looked at again for a share given to this host meanwhile, unless dacd is stopping
            return run.reason is None or not run.reason.startswith("stopped: dacd")

        self._stages.hand_off(buf.name, run, shares)
