"""A stage split across servers, as dacd starts its copiers (the roles: dacd/staging/share.py):
prepare and share 0 on the primary (the lead, `lead`), a share on each server (`run_share`),
finish on the primary (`finish`); the stage's progress summed from its shares' (`Total`).
Every copier is started as dacd/staging/run.py starts the single one: the owner's uid, gid and
groups, rlimits, its own process group, killed with the stage.

Two drivers use them: `Across` (dacd/staging/split_primary.py) runs the split across the
buffer's servers' dacds from the primary, and `run_owned` (dacd/staging/split_owners.py) is
what each other server's dacd runs of it, its own shares (docs/architecture.md, "A stage split
across servers"). `split_here`, below, runs every share on this host, as K in-process
"servers": how the staging tests run against the split copy and how bench/staging.py measures
it (DAC_STAGE_SPLIT=K).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable, TypeGuard

from daccore.errors import DacError, InternalError
from dacd.staging.run import Run, check_result, pairs_of, run_copier
from dacd.staging.share import SPLIT, encode

if TYPE_CHECKING:
    from daccore.records.models import ShareReport, StagePlan
    from dacd.staging.run import Line, Outcome, Staged

    #: a split stage's plan as the roles' copiers take it, and as `lead` says it: {"digest",
    #: "links", "split", "shares": [[bytes, files], ...]} (`Total` reads "links" and "shares")
    Plan = dict[str, Any]

__all__ = [
    "Total",
    "answers",
    "failure",
    "finish",
    "lead",
    "plan_dict",
    "run_share",
    "split_here",
]


def _plan(
    buffer: Staged,
    direction: str,
    fs_path: str,
    workers: int,
    role: str,
    count: int,
    index: int = 0,
    digest: str = "",
    split: int = SPLIT,
) -> bytes:
    return encode(
        pairs_of(buffer, direction, fs_path),
        os.path.join(fs_path, "striped"),
        "destination" if direction == "in" else "source",
        workers,
        role,
        count,
        index=index,
        digest=digest,
        split=split,
    )


def lead(
    buffer: Staged,
    direction: str,
    fs_path: str,
    workers: int,
    count: int,
    on_plan: Callable[[Plan], None],
    on_progress: Callable[[Line], None],
    timeout: float,
    run: Run,
    split: int = SPLIT,
) -> Outcome:
    """The primary's copier: directories, links and split files made, the plan's record to
    `on_plan` ({"digest", "links", "split", "shares": [[bytes, files], ...]}) as soon as it is
    known, then share 0 copied from the same walk: the copier's (result, stderr, exit)."""
    plan = _plan(buffer, direction, fs_path, workers, "prepare", count, split=split)
    return run_copier(
        buffer,
        plan,
        direction,
        on_progress,
        timeout,
        run,
        True,
        lambda p: on_plan({**p, "split": split}),
    )


def run_share(
    buffer: Staged,
    direction: str,
    fs_path: str,
    workers: int,
    plan: Plan,
    index: int,
    on_progress: Callable[[Line], None],
    timeout: float,
    run: Run,
) -> Outcome:
    """Share `index` of `plan` copied on this host: the copier's (result, stderr, exit)."""
    data = _plan(
        buffer,
        direction,
        fs_path,
        workers,
        "share",
        len(plan["shares"]),
        index=index,
        digest=plan["digest"],
        split=plan["split"],
    )
    return run_copier(buffer, data, direction, on_progress, timeout, run, True)


def finish(
    buffer: Staged, direction: str, fs_path: str, plan: Plan, timeout: float, run: Run
) -> None:
    """The primary's last step, once every share is done: split files' and directories'
    modes and times."""
    data = _plan(
        buffer,
        direction,
        fs_path,
        1,
        "finish",
        len(plan["shares"]),
        digest=plan["digest"],
        split=plan["split"],
    )
    result, stderr, rc = run_copier(buffer, data, direction, lambda p: None, timeout, run, True)
    check_result(direction, run, result, stderr, rc)


class Total:
    """One stage's progress from its shares': bytes and files summed (the plan knows every
    share's totals, so nothing is `counting`), rates summed, time left from the sums. With
    `indexes`, only those shares (of those the primary's `Across` has begun with, until the
    plan is known: then every share, the others' from their owners' reports), and the links
    counted only with `links` (the primary made them)."""

    def __init__(self, plan: Plan, indexes: list[int] | None = None, links: bool = True) -> None:
        self.plan = plan
        self.indexes = indexes
        self.links = links
        self.shares: dict[int, Line] = {}
        self.lock = threading.Lock()

    def add(self, index: int) -> None:
        with self.lock:
            if self.indexes is not None and index not in self.indexes:
                self.indexes.append(index)

    def update(self, index: int, progress: Line) -> Line:
        with self.lock:
            self.shares[index] = progress
            return self.sum()

    def sum(self) -> Line:
        shares = self.plan["shares"]
        counted = range(len(shares)) if self.indexes is None else self.indexes
        got = [p for i, p in self.shares.items() if i in counted]
        links = self.plan["links"] if self.links else 0
        bytes_total = sum(shares[i][0] for i in counted)
        files_total = sum(shares[i][1] for i in counted) + links
        done = sum(p.get("bytes_done", 0) for p in got)
        rate = sum(p.get("rate", 0) for p in got)
        left = bytes_total - done
        return {
            "bytes_done": done,
            "bytes_total": bytes_total,
            "files_done": sum(p.get("files_done", 0) for p in got) + links,
            "files_total": files_total,
            "rate": rate,
            "eta": 0.0 if not left else round(left / rate, 1) if rate else None,
            "counting": False,
        }


def split_here(
    buffer: Staged,
    direction: str,
    fs_path: str,
    workers: int,
    on_progress: Callable[[Line], None],
    timeout: float,
    run: Run,
    count: int,
    split: int = SPLIT,
) -> None:
    """The whole split stage on this host, `count` shares at once, each its own copier
    ("share0", the lead, ...); the first share to fail stops the others and fails the stage
    naming it (a failure before the plan is the lead's prepare step's: named as one copier's).
    DAC_STAGE_SPLIT=K in dacd's environment (tests, bench/staging.py) has dacd stage so."""
    if not pairs_of(buffer, direction, fs_path):
        return
    timer = threading.Timer(timeout, run.cancel, args=(f"timed out after {timeout:.0f} s",))
    timer.daemon = True
    timer.start()
    outcomes: dict[int, Outcome] = {}
    failed: list[int] = []
    lock = threading.Lock()
    threads: list[threading.Thread] = []
    plans: list[Plan] = []
    total = Total({"shares": [], "links": 0})

    def ended(i: int, out: Outcome) -> None:
        with lock:
            outcomes[i] = out
            if (out[2] != 0 or "error" in out[0]) and not failed:
                failed.append(i)
                run.kill()

    def share(i: int) -> None:
        try:
            out = run_share(
                buffer,
                direction,
                fs_path,
                workers,
                plans[0],
                i,
                lambda p: on_progress(total.update(i, p)),
                timeout,
                run,
            )
        except Exception as e:  # noqa: BLE001 - reported as this share's failure
            out = ({"error": f"copier failed: {type(e).__name__}: {e}"}, "", 1)
        ended(i, out)

    def planned(plan: Plan) -> None:  # the lead said its plan: the other shares start
        plans.append(plan)
        total.plan = plan
        threads.extend(threading.Thread(target=share, args=(i,)) for i in range(1, count))
        for t in threads:
            t.start()

    try:
        out = lead(
            buffer,
            direction,
            fs_path,
            workers,
            count,
            planned,
            lambda p: on_progress(total.update(0, p)) if plans else None,
            timeout,
            run,
            split,
        )
        ended(0, out)
        for t in threads:
            t.join()
        if not plans:
            check_result(direction, run, *out)
            raise InternalError(f"stage_{direction}: the copier said no plan")
        if failed:
            check_result(direction, run, *outcomes[failed[0]], where=f" on share{failed[0]}")
        finish(buffer, direction, fs_path, plans[0], timeout, run)
        on_progress(total.sum())
    finally:
        timer.cancel()


# -- what the primary and the other owners compare ----------------------------------------------


def plan_dict(plan: StagePlan) -> Plan:
    """A recorded StagePlan as the roles' copiers take it (what `lead` said of it)."""
    return {
        "digest": plan.digest,
        "links": plan.links,
        "split": plan.split,
        "shares": [list(s) for s in plan.shares],
    }


def answers(report: ShareReport | None, plan: StagePlan) -> TypeGuard[ShareReport]:
    """Whether a host's share report answers this plan."""
    return report is not None and (report.step, report.generation, report.attempt) == (
        plan.step,
        plan.generation,
        plan.attempt,
    )


def failure(direction: str, run: Run, out: Outcome, where: str) -> DacError | None:
    """A share's outcome as the stage's error (None: done)."""
    try:
        check_result(direction, run, *out, where=where)
    except DacError as e:
        return e
    return None
