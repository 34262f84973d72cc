"""A stage split across servers, as dacd drives it: prepare and share 0 on the primary (the
lead), a share on each other server, finish on the primary (the roles: dacd/copy_share.py).
Every copier is started as dacd/staging.py starts the single one: the owner's uid, gid and
groups, rlimits, its own process group, killed with the stage.

`split_here` runs every share on this host, as K in-process "servers": how the staging tests
run against the split copy and how bench/staging.py measures it (DAC_STAGE_SPLIT=K).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from daccore.errors import InternalError
from dacd import copy_share
from dacd.staging import Run, check_result, pairs_of, run_copier

__all__ = ["Total", "finish", "lead", "run_share", "split_here"]


def _plan(buffer, direction: str, fs_path: str, workers: int, role: str, count: int, **kw) -> bytes:
    return copy_share.encode(
        pairs_of(buffer, direction, fs_path),
        os.path.join(fs_path, "striped"),
        "destination" if direction == "in" else "source",
        workers,
        role,
        count,
        **kw,
    )


def lead(
    buffer,
    direction: str,
    fs_path: str,
    workers: int,
    count: int,
    on_plan: Callable[[dict], None],
    on_progress: Callable[[dict], None],
    timeout: float,
    run: Run,
    split: int = copy_share.SPLIT,
) -> tuple[dict, str, int]:
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
    buffer,
    direction: str,
    fs_path: str,
    workers: int,
    plan: dict,
    index: int,
    on_progress: Callable[[dict], None],
    timeout: float,
    run: Run,
) -> tuple[dict, str, int]:
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


def finish(buffer, direction: str, fs_path: str, plan: dict, timeout: float, run: Run) -> None:
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
    share's totals, so nothing is `counting`), rates summed, time left from the sums."""

    def __init__(self, plan: dict):
        self.plan = plan
        self.shares: dict[int, dict] = {}
        self.lock = threading.Lock()

    def update(self, index: int, progress: dict) -> dict:
        with self.lock:
            self.shares[index] = progress
            return self.sum()

    def sum(self) -> dict:
        got = self.shares.values()
        bytes_total = sum(b for b, _ in self.plan["shares"])
        files_total = sum(f for _, f in self.plan["shares"]) + self.plan["links"]
        done = sum(p.get("bytes_done", 0) for p in got)
        rate = sum(p.get("rate", 0) for p in got)
        left = bytes_total - done
        return {
            "bytes_done": done,
            "bytes_total": bytes_total,
            "files_done": sum(p.get("files_done", 0) for p in got) + self.plan["links"],
            "files_total": files_total,
            "rate": rate,
            "eta": 0.0 if not left else round(left / rate, 1) if rate else None,
            "counting": False,
        }


def split_here(
    buffer,
    direction: str,
    fs_path: str,
    workers: int,
    on_progress: Callable[[dict], None],
    timeout: float,
    run: Run,
    count: int,
    split: int = copy_share.SPLIT,
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
    outcomes: dict[int, tuple[dict, str, int]] = {}
    failed: list[int] = []
    lock = threading.Lock()
    threads: list[threading.Thread] = []
    plans: list[dict] = []
    total = Total({"shares": [], "links": 0})

    def ended(i: int, out: tuple[dict, str, int]) -> None:
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

    def planned(plan: dict) -> None:  # the lead said its plan: the other shares start
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
