"""Running the stages a running job asked for (`dacctl stage`, libdacstage; issue 36) on the
storage server that holds the buffer: this host's `stages/<host>/` in etcd, written by dac's
user service once it checked the caller, the job and the paths (daccore.services.injob).

Each stage is one copier run, the same copier and bounds as a `#DW` stage (dacd.staging.run:
as the buffer's owner, never root; its own process group with memory, file, process and CPU
limits; `stage_timeout`; no FIFO, device or socket; no link followed): one pair, the buffer
side under the part of the buffer it names (striped, or the asking node's private
directory), the other the user's path as the user gave it. Progress goes to
`stage-status/<host>/<job>/<id>` as the copier reports it.

Immediate stages (`now`) run as they come, at most `injob_running` of a job at once, the
rest queued by id. At-job-end stages wait for the job's stage_out step (`before_stage_out`
and `at_job_end`, which the reconciler calls), where they run after the immediate ones still
running and the job's own `#DW stage_out` lines, in id order; a later one to the same
destination revokes an earlier revocable one. A teardown (`torn_down`: Slurm's teardown,
`scancel --hurry`) cancels whatever of the job is left. Nothing is kept in memory across a
restart: at start every stage not final is looked at again, and one that was running is run
again from the start (the copier makes each destination anew); an at-job-end stage cut short
runs again with the stage_out step, which the reconciler runs again.

Nothing read from etcd is trusted: a stage must name this host, a buffer whose spec passes
daccore.rules.trust, whose primary is this host, and that buffer's owner.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from daccore.errors import Conflict, DacError, Fenced, InternalError, UserError
from daccore.escape import printable
from daccore.records.models import (
    Buffer,
    InJobStage,
    InJobStageStatus,
    Progress,
    StageState,
    StageWhen,
    State,
    StatusError,
)
from daccore.rules.trust import Untrusted, parse_buffer, shown
from dacd.staging.run import Run

if TYPE_CHECKING:
    from daccore.etcd.stream import Watch
    from daccore.settings.config import DacConfig
    from daccore.store import Store
    from dacd.staging.copier import Pair
    from dacd.staging.run import Line

log = logging.getLogger(__name__)

__all__ = ["InJobStager", "KEEP"]

#: final stages kept per job (the newest); older ones are dropped, so a job draining a
#: checkpoint every few seconds for days keeps a bounded record
KEEP = 100
#: the older ones are looked for after every this many stages (at most KEEP + PRUNE_EVERY are
#: kept), before the stage is marked done: a look reads every stage of the job and a drop is an
#: etcd write, which beside the job's next request made its answer wait (bench/injob_staging.py)
PRUNE_EVERY = 16
#: seconds between two looks for jobs whose buffer is gone
SWEEP = 60.0


class _Latest:
    """A stage's progress lines written to its status by a thread of their own, the newest
    only: the copier's reader never waits for etcd (a write's fsync shares the disk the copy
    is writing back to), and lines that came while one was written are
    replaced by the newest. A failed write stops the copy (`on_error`); `close()` writes what
    is left and raises what the writes raised (Fenced, Conflict)."""

    def __init__(self, write: Callable[[Line], None], on_error: Callable[[], None]) -> None:
        self._write, self._on_error, self._cond = write, on_error, threading.Condition()
        self._pending: Line | None = None
        self._closed = False
        self._error: BaseException | None = None
        self.last_written: Progress | None = None
        self._thread = threading.Thread(target=self._loop, name="injob-progress", daemon=True)
        self._thread.start()

    def offer(self, progress: Line) -> None:
        with self._cond:
            self._pending = progress
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                progress, self._pending = self._pending, None
                if progress is None or self._error is not None:
                    if self._closed:
                        return
                    continue
            try:
                self._write(progress)
                self.last_written = Progress(**progress)
            except BaseException as e:  # noqa: BLE001 - raised by close(), in the stage's thread
                with self._cond:
                    self._error = e
                self._on_error()  # the copy stops, as when the reader's own write failed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._error is not None:
            raise self._error


class InJobStager:
    """This host's in-job stages: `start()` lists and follows them, `stop()` leaves the
    running ones for the next start."""

    def __init__(self, store: Store, config: DacConfig, host: str) -> None:
        self.store, self.config, self.host = store, config, host
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="injob")
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, int], Run] = {}
        self._queued: dict[str, list[int]] = {}  # job -> ids waiting for a slot, by id
        self._stopping = threading.Event()
        self._watch: Watch | None = None
        self._threads: list[threading.Thread] = []

    # -- following etcd ------------------------------------------------------------------------

    def start(self) -> None:
        texts, revision = self.store.host_stage_texts(self.host)
        for key, value, incarnation in texts:
            self._look(key, value, incarnation)
        self._threads = [
            threading.Thread(target=self._follow, args=(revision,), name="injob", daemon=True),
            threading.Thread(target=self._sweep_loop, name="injob-sweep", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._watch is not None:
            self._watch.close()
        with self._lock:
            for run in self._runs.values():
                run.cancel("stopped: dacd is stopping")
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _follow(self, revision: int) -> None:
        from daccore.etcd.types import WatchCompacted

        while not self._stopping.is_set():
            try:
                self._watch, changes = self.store.watch_host_stages(self.host, revision + 1)
                for change in changes:
                    revision = change.revision
                    job, _, id = change.name.partition("/")
                    if change.record is None or not id.isdigit():
                        continue
                    current = self.store.stage_text(self.host, job, int(id))
                    if current is not None:
                        self._look(self.store.keys.stage(self.host, job, int(id)), *current)
            except WatchCompacted:
                texts, revision = self.store.host_stage_texts(self.host)
                for key, value, incarnation in texts:
                    self._look(key, value, incarnation)
            except Exception as e:  # noqa: BLE001 - the watch must go on
                if self._stopping.is_set():
                    return
                log.warning("in-job stage watch failed (%s); resuming at %d", e, revision)
                time.sleep(1)

    def _sweep_loop(self) -> None:
        while not self._stopping.wait(SWEEP):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001
                log.exception("in-job stage sweep failed")

    def sweep(self) -> None:
        """Drop the stages of jobs whose buffer is gone (the job ended and was torn down)."""
        texts, _ = self.store.host_stage_texts(self.host)
        jobs = {key.rsplit("/", 2)[-2] for key, _, _ in texts}
        for job in sorted(jobs):
            if self.store.buffer_text(job) is None:
                self.stop_job(job, "stopped: the job's buffer is gone")
                self.store.drop_job_stages(self.host, job)
                log.info("job %s: its in-job stages on %s dropped", job, self.host)

    # -- one stage -----------------------------------------------------------------------------

    def _checked(self, key: str, value: bytes) -> tuple[InJobStage, Buffer | None] | None:
        """The stage and the spec of its buffer, or None (logged) when either breaks a rule."""
        try:
            stage = InJobStage.model_validate_json(value)
            if key != self.store.keys.stage(stage.host, stage.job, stage.id):
                raise ValueError(f"names {shown(stage.host)}/{stage.job}/{stage.id}")
            if stage.host != self.host:
                raise ValueError(f"is for host {shown(stage.host)}")
            current = self.store.buffer_text(stage.buffer)
            if current is None:
                return stage, None
            (bkey, text), _, _ = current
            buf = parse_buffer(bkey, text, self.config)
            if buf.allocation.primary_host != self.host:
                raise ValueError(f"buffer {buf.name}'s primary is another host")
            if buf.owner_uid != stage.owner_uid:
                raise ValueError(f"is not of buffer {buf.name}'s owner")
            if buf.persistent != (stage.buffer != stage.job):
                raise ValueError("names a buffer that is not its job's")
        except (ValueError, Untrusted) as e:
            log.error("skipping %s: %s", shown(key, 200), shown(str(e).splitlines()[0], 200))
            return None
        return stage, buf

    def _look(self, key: str, value: bytes, incarnation: int) -> None:
        checked = self._checked(key, value)
        if checked is None:
            return
        stage, buf = checked
        status = self.store.stage_status_of(self.host, stage.job, stage.id)
        if status is not None and status.state.final:
            return
        ref = (stage.job, stage.id)
        with self._lock:
            run = self._runs.get(ref)
        if stage.cancel:
            if run is not None:
                run.cancel("cancelled")
            else:
                self._unqueue(ref)
                self._final(stage, incarnation, status, StageState.CANCELLED)
            return
        if buf is None or buf.desired_state is State.DELETED:
            self._final(
                stage, incarnation, status, StageState.CANCELLED, "the job's buffer is gone"
            )
            return
        if stage.when is StageWhen.AT_JOB_END:
            self._revoke(stage.job)  # at once, so the user sees it; at_job_end runs the rest
            return
        if run is not None:
            return  # it runs already
        with self._lock:
            queued = self._queued.setdefault(stage.job, [])
            if stage.id not in queued:
                queued.append(stage.id)
                queued.sort()
        self._kick(stage.job)

    def _unqueue(self, ref: tuple[str, int]) -> None:
        with self._lock:
            if ref[1] in self._queued.get(ref[0], []):
                self._queued[ref[0]].remove(ref[1])

    def _kick(self, job: str) -> None:
        """Start the job's queued stages while it has fewer than injob_running running."""
        while True:
            with self._lock:
                running = sum(1 for j, _ in self._runs if j == job)
                queued = self._queued.get(job, [])
                if running >= self.config.injob_running or not queued or self._stopping.is_set():
                    return
                id = queued.pop(0)
                run = self._runs[(job, id)] = Run()
            try:
                self._pool.submit(self._run_now, job, id, run)
            except RuntimeError:  # shutting down
                with self._lock:
                    self._runs.pop((job, id), None)
                return

    def _run_now(self, job: str, id: int, run: Run) -> None:
        try:
            current = self.store.stage_text(self.host, job, id)
            checked = (
                self._checked(self.store.keys.stage(self.host, job, id), current[0])
                if current
                else None
            )
            if current and checked is not None and checked[1] is not None:
                self.run_one(checked[0], checked[1], current[1], run)
        except (Fenced, Conflict) as e:
            log.warning("job %s: in-job stage %d not recorded: %s", job, id, e)
        except Exception:  # noqa: BLE001 - a stage's thread must never die silently
            log.exception("job %s: in-job stage %d failed", job, id)
        finally:
            with self._lock:
                self._runs.pop((job, id), None)
            self._kick(job)

    def run_one(self, stage: InJobStage, buf: Buffer, incarnation: int, run: Run) -> bool:
        """Copy `stage` to its end, its status kept: True when it is done. A stage stopped
        because dacd stops is left running in the record, for the next start to run again."""
        from daccore.backends import get as get_backend
        from dacd.staging.copier import encode_plan
        from dacd.staging.run import check_result, run_copier, time_limit

        old = self.store.stage_status_of(self.host, stage.job, stage.id)
        started = time.time()
        values = dict(
            id=stage.id,
            job=stage.job,
            host=self.host,
            state=StageState.RUNNING,
            attempt=(old.attempt if old else 0) + 1,
            started_at=started,
        )

        def put(**fields: object) -> None:
            self.store.put_stage_status(
                InJobStageStatus(**{**values, **fields, "updated_at": time.time()}), incarnation
            )

        put()
        direction = stage.direction.value
        log.info(
            "job %s: in-job stage %d (%s %s) on %s",
            stage.job,
            stage.id,
            direction,
            stage.type.value,
            self.host,
        )
        try:
            backend = get_backend(
                self.config.pools[buf.request.pool].backend.value, self.config, self.host
            )
            inside = os.path.join(backend.variables(buf, "stage_out")["fs_path"], stage.part)
            there = os.path.join(inside, stage.inner) if stage.inner else inside
            pair: Pair = {
                "type": stage.type.value,
                "source": stage.source if direction == "in" else there,
                "destination": there if direction == "in" else stage.destination,
            }
            side = "destination" if direction == "in" else "source"
            plan = encode_plan([pair], inside, side, self.config.stage_workers)
            seconds = time_limit(self.config.stage_timeout)
            timer = threading.Timer(seconds, run.cancel, args=(f"timed out after {seconds:.0f} s",))
            timer.daemon = True
            timer.start()
            progress = _Latest(lambda p: put(progress=Progress(**p)), run.kill)
            try:
                result, stderr, rc = run_copier(buf, plan, direction, progress.offer, seconds, run)
            finally:
                timer.cancel()
                progress.close()
            check_result(direction, run, result, stderr, rc)
        except (Fenced, Conflict):
            raise
        except Exception as e:  # noqa: BLE001 - every failure reaches the user's status
            reason = getattr(run, "reason", None) or ""
            if reason.startswith("stopped: dacd is stopping"):
                return False  # run again at the next start
            if reason == "cancelled" or reason.startswith("stopped:"):
                put(state=StageState.CANCELLED, ended_at=time.time(), error=None)
                log.info("job %s: in-job stage %d cancelled (%s)", stage.job, stage.id, reason)
                return False
            if not isinstance(e, DacError):
                log.exception("job %s: in-job stage %d failed", stage.job, stage.id)
                e = InternalError(f"stage failed on {self.host}: {type(e).__name__}: {e}")
            message = printable(str(e).replace(f"stage_{direction}", f"stage {direction}", 1))
            log.error("job %s: in-job stage %d: %s", stage.job, stage.id, message)
            put(
                state=StageState.FAILED,
                ended_at=time.time(),
                error=StatusError(category=e.kind, message=message),
            )
            return False
        ended = time.time()
        if stage.id % PRUNE_EVERY == 0:  # before the job sees it done and asks again
            self._prune(stage.job)
        put(state=StageState.DONE, ended_at=ended, progress=progress.last_written)
        log.info("job %s: in-job stage %d done", stage.job, stage.id)
        return True

    def _final(
        self,
        stage: InJobStage,
        incarnation: int,
        status: InJobStageStatus | None,
        state: StageState,
        why: str = "",
    ) -> None:
        try:
            self.store.put_stage_status(
                InJobStageStatus(
                    id=stage.id,
                    job=stage.job,
                    host=self.host,
                    state=state,
                    progress=status.progress if status else None,
                    attempt=status.attempt if status else 0,
                    started_at=status.started_at if status else 0.0,
                    ended_at=time.time(),
                    updated_at=time.time(),
                    error=StatusError(category="user", message=why) if why else None,
                ),
                incarnation,
            )
        except Conflict:
            pass  # the request is gone: nothing to answer

    def _prune(self, job: str) -> None:
        finals = [
            s.id
            for s, st in self.store.job_stages(job, [self.host])
            if st is not None and st.state.final and s.when is StageWhen.NOW
        ]
        if len(finals) > KEEP:
            self.store.drop_stages(self.host, job, finals[: len(finals) - KEEP])

    # -- the job's end -------------------------------------------------------------------------

    def before_stage_out(self, buf: Buffer, run: Run) -> None:
        """At the job's stage_out step, before its `#DW stage_out` lines: wait until every
        immediate stage of the job on this host has ended (queued ones run first; a
        cancelled one ends at once), within stage_timeout; past it they are cancelled and the
        step fails."""
        from dacd.staging.run import time_limit

        deadline = time.monotonic() + time_limit(self.config.stage_timeout)
        while True:
            left = [
                s
                for s, st in self.store.job_stages(buf.name, [self.host])
                if s.when is StageWhen.NOW and (st is None or not st.state.final)
            ]
            if not left:
                return
            if run.reason is not None:
                raise UserError(f"stage_out {run.reason}")
            if time.monotonic() > deadline:
                self.stop_job(buf.name, "stopped: still running when stage_out timed out")
                raise UserError(
                    f"stage_out: in-job stage {left[0].id} still ran after "
                    f"{time_limit(self.config.stage_timeout):.0f} s: cancelled"
                )
            time.sleep(0.2)

    def at_job_end(self, buf: Buffer, run: Run) -> None:
        """After the job's `#DW stage_out` lines: its at-job-end stages, in id order, each
        revocable one a later one to the same destination revoked skipped; the first that
        fails fails the step, as a failed `#DW stage_out` line does (Slurm keeps the buffer)."""
        self._revoke(buf.name)
        for stage, status in self.store.job_stages(buf.name, [self.host]):
            if stage.when is not StageWhen.AT_JOB_END or (status and status.state.final):
                continue
            current = self.store.stage_text(self.host, stage.job, stage.id)
            if current is None:
                continue
            if stage.cancel:
                self._final(stage, current[1], status, StageState.CANCELLED)
                continue
            if not self.run_one(stage, buf, current[1], run):
                if run.reason is not None:
                    raise UserError(f"stage_out {run.reason}")
                last = self.store.stage_status_of(self.host, stage.job, stage.id)
                why = last.error.message if last and last.error else "failed"
                raise UserError(f"stage_out: in-job stage {stage.id} failed: {why}")

    def _revoke(self, job: str) -> None:
        """Each revocable at-job-end stage that a later at-job-end stage of the job to the
        same destination follows is revoked (a ring of checkpoints drains only its newest)."""
        stages = [
            (s, st)
            for s, st in self.store.job_stages(job, [self.host])
            if s.when is StageWhen.AT_JOB_END and not s.cancel
        ]
        for stage, status in stages:
            later = any(o.id > stage.id and o.destination == stage.destination for o, _ in stages)
            if stage.revocable and later and (status is None or not status.state.final):
                current = self.store.stage_text(self.host, job, stage.id)
                if current is not None:
                    self._final(stage, current[1], status, StageState.REVOKED)

    def torn_down(self, job: str) -> None:
        """The job's buffer is being torn down (Slurm's teardown, `scancel --hurry`): what
        of its stages is left is cancelled, and their records go."""
        self.stop_job(job, "stopped: the job's buffer is being torn down")
        if self.store.job_stages(job, [self.host]):
            self.store.drop_job_stages(self.host, job)

    def stop_job(self, job: str, reason: str) -> None:
        """Cancel every stage of `job` on this host (teardown, `scancel --hurry`): running
        ones are killed, queued ones marked cancelled."""
        with self._lock:
            self._queued.pop(job, None)
            runs = [r for (j, _), r in self._runs.items() if j == job]
        for run in runs:
            run.cancel(reason)
        for stage, status in self.store.job_stages(job, [self.host]):
            if status is None or not status.state.final:
                current = self.store.stage_text(self.host, job, stage.id)
                if current is not None and (job, stage.id) not in self._runs:
                    self._final(stage, current[1], status, StageState.CANCELLED, reason)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with self._lock:
                if not any(j == job for j, _ in self._runs):
                    return
            time.sleep(0.05)
