"""A split stage's shares on a server other than the primary (issue 35): `run_owned`, what
its dacd runs of a plan it owns a share of, once it has found the plan's proof
(dacd/staging/reach.py), each share's figures reported in this host's status for the primary's
`Across` (dacd/staging/split_primary.py) to sum. The reconciler hands it to its stage pool
(dacd/staging/shares.py).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Callable

from daccore.errors import DacError, Fenced, Superseded
from daccore.records.models import ShareReport
from dacd.staging.reach import proves
from dacd.staging.run import Run
from dacd.staging.split import failure, plan_dict, run_share

if TYPE_CHECKING:
    from daccore.records.models import Buffer, StagePlan
    from daccore.store import Store
    from dacd.staging.run import Line

log = logging.getLogger(__name__)

__all__ = ["run_owned"]


def run_owned(
    store: Store,
    host: str,
    buffer: Buffer,
    plan: StagePlan,
    todo: list[int],
    fs_path: str,
    workers: int,
    timeout: float,
    run: Run,
    report: ShareReport,
    write: Callable[[ShareReport, str], None],
) -> None:
    """This server's shares of `plan` (`todo`, of those it owns), one after the other, as the
    user, once the plan's proof is found at fs_path here (else the report says `unreached`
    and the primary gives the shares to others); each share's figures (`parts`, summed by the
    primary into the stage's progress) and the report (`write(report, step)`: this host's
    status) as they go. The record is looked at every second: marked failed (another share
    failed, or the stage timed out), dropped, planned anew or the share given to another
    server, the copier is stopped and nothing is reported."""
    direction = plan.step.removeprefix("stage_")
    if not proves(fs_path, plan.proof):
        log.error(
            "buffer %s: %s shares %s left to the other servers: %s here is not the primary's"
            " filesystem (the plan's proof is not there)",
            buffer.name,
            plan.step,
            ",".join(map(str, todo)),
            fs_path,
        )
        write(report.model_copy(update={"unreached": True}), "")
        return
    parts = {p[0]: p for p in report.parts if p[0] not in todo}
    shown = threading.Lock()
    now = [report]

    def show(i: int, p: Line, step: str | None = None) -> None:
        with shown:
            parts[i] = (i, p.get("bytes_done", 0), p.get("files_done", 0), p.get("rate", 0))
            now[0] = now[0].model_copy(update={"parts": [parts[k] for k in sorted(parts)]})
            write(now[0], plan.step if step is None else step)

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(1.0):
            try:
                recorded = store.stage_plan(buffer.name, plan.step)
            except DacError:
                continue  # etcd out of reach: the share goes on, the stage's time bounds it
            why = (
                "stopped: the stage's plan is gone"
                if recorded is None
                else f"stopped: {recorded.failed}"
                if recorded.failed
                else "stopped: the stage was planned again"
                if (recorded.generation, recorded.attempt) != (plan.generation, plan.attempt)
                else "stopped: its share was given to another server"
                if not set(todo) <= set(recorded.owned_by(host))
                else None
            )
            if why:
                run.cancel(why)
                return

    watcher = threading.Thread(target=watch, name=f"plan-{buffer.name}", daemon=True)
    watcher.start()
    timer = threading.Timer(timeout, run.cancel, args=(f"timed out after {timeout:.0f} s",))
    timer.daemon = True
    timer.start()
    try:
        for i in todo:
            show(i, {})
        for i in todo:
            try:
                out = run_share(
                    buffer,
                    direction,
                    fs_path,
                    workers,
                    plan_dict(plan),
                    i,
                    functools.partial(show, i),
                    timeout,
                    run,
                )
            except (Fenced, Superseded):
                raise  # this host's status may not be written: nothing is reported
            except Exception as e:  # noqa: BLE001 - reported as this share's failure
                out = ({"error": f"copier failed: {type(e).__name__}: {e}"}, "", 1)
            if run.reason is not None and run.reason.startswith("stopped"):
                log.info("buffer %s: %s share %d %s", buffer.name, plan.step, i, run.reason)
                return
            error = failure(direction, run, out, f" on {host}")
            if error is not None:
                log.error("buffer %s: %s", buffer.name, error)
                with shown:
                    now[0] = now[0].model_copy(
                        update={"failed": str(error), "category": error.kind}
                    )
                    write(now[0], "")
                return
            with shown:
                now[0] = now[0].model_copy(update={"done": sorted({*now[0].done, i})})
            bytes_, files = plan.shares[i]
            show(i, {"bytes_done": bytes_, "files_done": files}, plan.step if i != todo[-1] else "")
            log.info("buffer %s: %s share %d done on %s", buffer.name, plan.step, i, host)
    finally:
        stop.set()
        timer.cancel()
