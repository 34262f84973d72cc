"""A split stage's shares as this dacd takes part in them (issue 35): which servers the primary
shares a stage with, and, on another server, the shares of a plan it owns handed to the stage
pool and reported in its own status. The primary's side of the stage (the lead, the plan's
record, the take-over, the finish) is `Across` in dacd/staging/split_primary.py, the shares'
copying `run_owned` in dacd/staging/split_owners.py; the proof and the rules of who reaches a
filesystem are dacd/staging/reach.py.

`SplitShares` is a part of `dacd.reconciler.Reconciler`, kept apart so that the lifecycle's
module holds the lifecycle: it uses the reconciler's store, host, config, view, stage pool and
its table of running stages (`_staging`, under `_lock`), as the reconciler's own stages do.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from daccore.backends import get as get_backend
from daccore.errors import Fenced, StoreUnavailable, Superseded
from daccore.records.models import State, Status
from daccore.rules.trust import shown

if TYPE_CHECKING:
    import threading
    from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("dacd.reconciler")

__all__ = ["SplitShares"]


class SplitShares:
    """The reconciler's part in split stages (see the module's docstring)."""

    store: Any
    config: Any
    host: str
    _view: str | None
    _lock: threading.Lock
    _staging: dict
    _stages: ThreadPoolExecutor

    if TYPE_CHECKING:  # the reconciler's own, declared for mypy: nothing of the mixin's

        def schedule(self, name: str) -> None: ...

        def _log_once(self, key: str, why: str, generation: int = 0) -> bool: ...

    def _split_owners(self, buf, backend) -> list[str]:
        """The servers a stage of `buf` is split across, this primary first: those of its
        hosts whose dacd is alive and reaches the buffer's filesystem where this one does
        (`reaches` in dacd/staging/reach.py, by the backend's `split_reach`: a local buffer's
        servers must share this dacd's mount namespace, a lustre buffer's mount its client;
        a daos buffer's never split; each proves it at copy time). One (no split) for a
        buffer on one server, or whose other servers cannot reach it."""
        from dacd.staging.reach import reaches, split_reach

        hosts = buf.allocation.hosts
        if len(hosts) < 2 or self._view is None:
            return [self.host]
        reach = split_reach(backend)
        if reach == "none":
            return [self.host]
        views = self.store.stage_views(hosts)
        alike = [h for h in hosts if h != self.host and reaches(self._view, views.get(h), reach)]
        alive = self.store.alive_among(alike) if alike else set()
        return [self.host] + [h for h in alike if h in alive]

    def _share_due(self, buf, incarnation: int, mine, backend: str) -> bool:
        """A split stage's shares this host owns and has not reported (`run_owned` in
        dacd/staging/split_owners.py): handed to the stage pool, True; False when there are
        none. The record is checked (one writer: the primary), and its filesystem must be the
        primary's as this dacd's config places it."""
        from daccore.records.models import StagePlan
        from dacd.staging.split import answers

        primary = buf.allocation.primary_host
        if (
            self.host == primary
            or len(buf.allocation.hosts) < 2
            or buf.desired_state not in (State.STAGED_IN, State.STAGED_OUT)
            or self._view is None
        ):
            return False
        step = "stage_in" if buf.desired_state is State.STAGED_IN else "stage_out"
        found = self.store.stage_plan_text(buf.name, step)
        if found is None:
            return False
        key, text = found
        try:
            plan = StagePlan.model_validate_json(text)
            fs_path = get_backend(backend, self.config, primary).variables(buf, step)["fs_path"]
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
        todo = [i for i in plan.owned_by(self.host) if i not in done]
        if not todo:
            return False
        self._hand_off_share(buf, incarnation, mine, plan, todo, fs_path, report)
        return True

    def _hand_off_share(self, buf, incarnation, mine, plan, todo, fs_path, report) -> None:
        """This host's shares of a split stage to the stage pool, as the user, reported in
        this host's own status; the buffer is looked at again when they end. Nothing else
        writes this status meanwhile: reconcile leaves a buffer alone while its stage runs."""
        from daccore.records.models import ShareReport
        from dacd.staging.run import Run, time_limit
        from dacd.staging.split_owners import run_owned

        run = Run()
        with self._lock:
            self._staging[buf.name] = run
        base = mine or Status(buffer=buf.name, host=self.host)
        report = report or ShareReport(
            step=plan.step, generation=plan.generation, attempt=plan.attempt
        )

        def write(now, step: str) -> None:
            status = base.model_copy(
                update={
                    "progress": None,  # the stage's is the primary's: the shares' sum
                    "share": now,
                    "step": step,
                    "updated_at": time.time(),
                }
            )
            try:
                self.store.put_status(status, incarnation)
            except StoreUnavailable as e:  # a progress line: the report is written again
                log.warning("buffer %s: share progress not shown (%s)", buf.name, e)

        again = [True]

        def shares() -> None:
            log.info(
                "buffer %s (job %s): %s shares %s on %s",
                buf.name,
                buf.job_id,
                plan.step,
                ",".join(map(str, todo)),
                self.host,
            )
            try:
                run_owned(
                    self.store,
                    self.host,
                    buf,
                    plan,
                    todo,
                    fs_path,
                    self.config.stage_workers,
                    time_limit(self.config.stage_timeout),
                    run,
                    report,
                    write,
                )
            except (Fenced, Superseded) as e:  # a new lease's relist brings the buffer back
                log.warning("buffer %s: %s shares not recorded: %s", buf.name, plan.step, e)
                again[0] = False
            except Exception:  # noqa: BLE001 - a stage's thread must never die silently
                log.exception("buffer %s: %s shares failed", buf.name, plan.step)
                again[0] = False  # not at once: the next change of the buffer, or resync
            finally:
                with self._lock:
                    del self._staging[buf.name]
                if again[0] and (run.reason is None or not run.reason.startswith("stopped: dacd")):
                    self.schedule(buf.name)  # a share given to this host meanwhile

        try:
            self._stages.submit(shares)
        except RuntimeError:  # shutting down
            with self._lock:
                del self._staging[buf.name]
