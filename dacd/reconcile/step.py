"""One step of a buffer on this host: its playbook run through the runner (dacd/runner.py), or
its stage copied, with its progress and its outcome (the state reached, or the error, with who
must act) recorded in the statuses of the hosts it runs for (dacd/reconcile/step_status.py).

Every failure reaches the waiting Slurm call as the step's error, except Fenced and Superseded:
nothing may be written then (the next lease's pass runs the step again, and a buffer deleted or
created anew is looked at afresh).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from daccore.backends import get as get_backend
from daccore.errors import DacError, Fenced, InternalError, Superseded
from daccore.escape import printable
from daccore.records.models import Buffer, State, Status, StatusError
from dacd import metrics
from dacd.owed import leave_owed
from dacd.reconcile.step_status import STAGE_STEPS, StepStatus

if TYPE_CHECKING:
    from daccore.backends.base import Backend
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from dacd.staging.injob import InJobStager
    from dacd.staging.run import Run

log = logging.getLogger("dacd.reconciler")  # the reconciler's lines, whichever part says them

__all__ = ["StepRunner", "may_be_attached"]


class StepRunner:
    """Runs a step and records it (see the module's docstring). `run_step` runs a playbook
    (dacd.runner.run_step's arguments), `statuses(name)` reads a buffer's statuses checked,
    `split_owners(buf, backend)` the servers a stage is split across (SplitShares.owners)."""

    def __init__(
        self,
        store: Store,
        config: DacConfig,
        host: str,
        run_step: Callable[..., None],
        injob: InJobStager | None,
        statuses: Callable[[str], dict[str, Status]],
        split_owners: Callable[[Buffer, Backend], list[str]],
    ) -> None:
        self._store, self._config, self._host = store, config, host
        self._run_step, self._injob = run_step, injob
        self._statuses, self._split_owners = statuses, split_owners

    def run(
        self,
        buf: Buffer,
        incarnation: int,
        mine: Status | None,
        step: str,
        target: State,
        backend_name: str,
        hosts: list[str],
        run: Run | None = None,
    ) -> None:
        """Run `step`, recording its progress and outcome in the status of each of `hosts`,
        of this incarnation of the buffer only (Superseded ends the step otherwise)."""
        status = StepStatus(
            self._store, self._host, buf, step, hosts, incarnation, mine, self._statuses
        )
        status.write()
        log.info("buffer %s (job %s): %s on %s", buf.name, buf.job_id, step, self._host)
        started, backend = time.monotonic(), None
        try:
            backend = get_backend(backend_name, self._config, self._host)
            if step not in STAGE_STEPS:
                self._playbook(buf, step, backend, status)
            elif self._host == buf.allocation.primary_host:
                self._stage(buf, step, backend, run, status, incarnation, mine)
        except (Fenced, Superseded):
            raise  # nothing may be written: the next lease's pass runs the step again, and
            # a buffer deleted or created anew is looked at afresh
        except Exception as e:  # noqa: BLE001 - every failure must reach the waiting Slurm call
            self._failed(buf, step, target, backend, status, started, e)
            return
        metrics.step_finished(step, backend, started)
        # mount and unmount make the mounts match the spec; delete removes every one
        if step in ("mount", "unmount"):
            status.attached = buf.attachments
        elif step == "delete":
            status.attached = {}
        status.write(state=target, step="", error=None)

    def _playbook(self, buf: Buffer, step: str, backend: Backend, status: StepStatus) -> None:
        self._run_step(
            backend.name,
            step,
            self._host,
            backend.variables(buf, step, status.attached),
            status.on_task,
            inventory=backend.inventory(buf, step, status.attached),
            forks=self._config.ansible_forks,
            ssh=self._config.ssh,
        )

    def _failed(
        self,
        buf: Buffer,
        step: str,
        target: State,
        backend: Backend | None,
        status: StepStatus,
        started: float,
        e: Exception,
    ) -> None:
        """`step` failed with `e` (called where it is caught): the error in the statuses."""
        if not isinstance(e, DacError):
            log.exception("buffer %s (job %s): %s failed", buf.name, buf.job_id, step)
        error = (
            e
            if isinstance(e, DacError)
            else InternalError(f"{step} failed on {self._host}: {type(e).__name__}: {e}")
        )
        message = printable(str(error))  # a path in it may hold any byte (daccore/escape.py)
        log.error("buffer %s (job %s): %s", buf.name, buf.job_id, message)
        metrics.step_finished(step, backend, started, error)
        if (
            step == "delete"
            and backend is not None
            and leave_owed(
                self._store, self._config, self._host, buf, backend, status.attached, error
            )
        ):
            status.write(state=target, step="", error=None, attached={})  # the nodes owe the rest
            return
        if step in ("mount", "unmount", "delete"):
            # what a failed step may have mounted is what the next step unmounts
            status.attached = may_be_attached(status.attached, buf.attachments, error)
        elif step == "create" and backend is not None and backend.one_run_for_all_hosts:
            self._undo_create(buf, backend)
        status.write(
            error=StatusError(
                category=error.kind, message=message, detail=getattr(error, "output", "")[-8000:]
            )
        )

    def _undo_create(self, buf: Buffer, backend: Backend) -> None:
        """A create that failed on one server stops everywhere (any_errors_fatal); what the
        others built is taken down at once, not left for Slurm's teardown (which runs delete
        again: it is idempotent)."""
        try:
            self._run_step(
                backend.name,
                "delete",
                self._host,
                backend.variables(buf, "delete"),
                None,
                inventory=backend.inventory(buf, "delete", {}),
                forks=self._config.ansible_forks,
                ssh=self._config.ssh,
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

    def _stage(
        self,
        buf: Buffer,
        step: str,
        backend: Backend,
        run: Run | None,
        status: StepStatus,
        incarnation: int,
        mine: Status | None,
    ) -> None:
        """Staging runs on the primary host, which has the filesystem mounted; progress goes
        to the status at most once a second (the copier's own pace). A buffer of several
        servers that see the primary's filesystem is split across their dacds (issue 35)."""
        from dacd.staging.run import Run, stage, time_limit

        fs_path = backend.variables(buf, step)["fs_path"]
        run = run or Run()
        injob = self._injob if step == "stage_out" and not buf.persistent else None
        if injob is not None:  # the job's own stages still running end first (staging/injob.py)
            injob.before_stage_out(buf, run)
        args = (buf, step.removeprefix("stage_"), fs_path, self._config.stage_workers)
        limit = time_limit(self._config.stage_timeout)
        split = int(os.environ.get("DAC_STAGE_SPLIT") or 0)  # tests and bench only: every
        if split > 1:  # stage split across that many copiers here (dacd/staging/split.py)
            from dacd.staging.split import split_here

            split_here(*args, status.on_progress, limit, run, split)
        elif len(owners := self._split_owners(buf, backend)) > 1:
            from dacd.staging.split_primary import Across

            Across(
                self._store,
                self._host,
                buf,
                step,
                fs_path,
                self._config.stage_workers,
                owners,
                status.attempt,
                incarnation,
                mine,
                status.on_progress,
                status.on_share,
                limit,
                run,
            ).stage()
        else:
            stage(*args, status.on_progress, limit, run)
        if injob is not None:  # then those it asked to run at its end, in order
            injob.at_job_end(buf, run)


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
