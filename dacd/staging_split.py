"""A stage split across servers, as dacd drives it: prepare on the primary, a share on each
server, finish on the primary (the roles: dacd/copy_share.py). Every copier is started as
dacd/staging.py starts the single one: the owner's uid, gid and groups, rlimits, its own
process group, killed with the stage.

`split_here` runs every share on this host, as K in-process "servers": how the staging tests
run against the split copy and how bench/staging.py measures it (DAC_STAGE_SPLIT=K).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from dacd import copy_share
from dacd.staging import Run, check_result, pairs_of, run_copier

__all__ = ["Total", "finish", "prepare", "run_share", "split_here"]


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


def prepare(
    buffer,
    direction: str,
    fs_path: str,
    count: int,
    timeout: float,
    run: Run,
    split: int = copy_share.SPLIT,
) -> dict:
    """The primary's first step: directories, links and split files made; the plan's record
    ({"digest", "links", "split", "shares": [[bytes, files], ...]})."""
    plan = _plan(buffer, direction, fs_path, 1, "prepare", count, split=split)
    result, stderr, rc = run_copier(buffer, plan, direction, lambda p: None, timeout, run, True)
    check_result(direction, run, result, stderr, rc)
    return {**result["plan"], "split": split}


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
    """The whole split stage on this host, `count` shares at once, each as its own copier
    ("share0" ...); the first share to fail stops the others and fails the stage naming it."""
    timer = threading.Timer(timeout, run.cancel, args=(f"timed out after {timeout:.0f} s",))
    timer.daemon = True
    timer.start()
    try:
        plan = prepare(buffer, direction, fs_path, count, timeout, run, split)
        total = Total(plan)
        outcomes: dict[int, tuple[dict, str, int]] = {}
        failed: list[int] = []
        lock = threading.Lock()

        def share(i: int) -> None:
            def progress(p: dict) -> None:
                on_progress(total.update(i, p))

            try:
                out = run_share(
                    buffer, direction, fs_path, workers, plan, i, progress, timeout, run
                )
            except Exception as e:  # noqa: BLE001 - reported as this share's failure
                out = ({"error": f"copier failed: {type(e).__name__}: {e}"}, "", 1)
            with lock:
                outcomes[i] = out
                if (out[2] != 0 or "error" in out[0]) and not failed:
                    failed.append(i)
                    run.kill()

        threads = [threading.Thread(target=share, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            check_result(direction, run, *outcomes[failed[0]], where=f" on share{failed[0]}")
        finish(buffer, direction, fs_path, plan, timeout, run)
        on_progress(total.sum())
    finally:
        timer.cancel()
