"""The stage pool: stages (stage_in, stage_out, a split stage's shares) run on `concurrency`
threads of their own, not on the workers: a stage may take an hour, or hang until dacd kills
it, and meanwhile every other buffer's steps and every teardown still proceed.

Each buffer has at most one stage under way here, its `Run` kept so that a pass over the buffer
leaves it alone meanwhile (nothing else writes its status) and a teardown, or dacd stopping,
kills its copiers. The buffer is looked at again when the stage ends.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dacd.staging.run import Run

__all__ = ["StagePool"]


class StagePool:
    """The stage pool and the stage under way of each buffer (see the module's docstring);
    `schedule(name)` looks at a buffer again."""

    def __init__(self, workers: int, schedule: Callable[[str], None]) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="stage")
        self._schedule = schedule
        self._lock = threading.Lock()
        self._running: dict[str, Run] = {}  # buffer name -> the Run of the stage under way

    def running(self, name: str) -> Run | None:
        with self._lock:
            return self._running.get(name)

    def hand_off(self, name: str, run: Run, work: Callable[[], bool]) -> None:
        """`work` to the pool, `run` the buffer's stage under way until it ends; then the
        buffer is looked at again, unless `work` returned False (it said why)."""
        with self._lock:
            self._running[name] = run

        def stage() -> None:
            again = True
            try:
                again = work()
            finally:
                with self._lock:
                    del self._running[name]
                if again:
                    self._schedule(name)

        try:
            self._pool.submit(stage)
        except RuntimeError:  # shutting down
            with self._lock:
                del self._running[name]

    def stop(self) -> None:
        """Every stage under way stopped (re-run at the next start), the pool shut down."""
        with self._lock:
            for run in self._running.values():
                run.cancel("stopped: dacd is stopping")
        self._pool.shutdown(wait=True, cancel_futures=True)
