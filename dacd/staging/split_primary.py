"""A stage split across the buffer's servers, driven by its primary's dacd (issue 35):
`Across`, the lead, the plan's record (`stageplans/<buffer>/<step>`), the other owners woken,
their shares followed in their statuses, a lost server's shares taken over, the finish. Each
other server's dacd copies its shares with `run_owned` (dacd/staging/split_owners.py); the
copiers are started by dacd/staging/split.py.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from daccore.errors import (
    AdminError,
    BadRecord,
    DacError,
    Fenced,
    InternalError,
    Kind,
    StoreUnavailable,
    Superseded,
    UserError,
)
from daccore.records.models import ShareReport
from dacd.staging.reach import drop_proof, make_proof
from dacd.staging.run import Run, check_result, pairs_of
from dacd.staging.share import FILE_COST, SPLIT
from dacd.staging.split import Total, answers, failure, finish, lead, plan_dict, run_share

if TYPE_CHECKING:
    from daccore.records.models import Buffer, StagePlan, Status
    from daccore.store import Store
    from dacd.staging.run import Line, Outcome
    from dacd.staging.split import Plan

log = logging.getLogger(__name__)

__all__ = ["Across"]


_ERRORS: dict[Kind | None, type[DacError]] = {
    Kind.USER: UserError,
    Kind.ADMIN: AdminError,
    Kind.INTERNAL: InternalError,
}


class Across:
    """A stage split across the buffer's servers, driven by its primary's dacd (the lead).

    Prepare runs here and says the plan; the plan's record (`stageplans/<buffer>/<step>`,
    fenced on this dacd's lease) names each share's owner, and each other owner's dacd is woken
    through its work key to copy its shares (`run_owned`), reporting them in its own status.
    This dacd copies share 0 from prepare's walk, and any share it takes over; it reads the
    others' reports as they come (a watch on the buffer's statuses), and finishes once every
    share is reported done for the plan. The first share to fail fails the stage in one line
    naming its server (`stage_in failed on <server>: <path>: <reason>`): the record is marked
    failed, so every other owner stops. A lost server (its `alive` key gone with its lease) has
    its unfinished shares given to the least loaded live owner. A plan of this generation
    already recorded (this dacd restarted mid-stage) is resumed, not planned again: the lead is
    skipped and only the shares no report says done are copied again."""

    #: seconds between two looks at the owners' leases
    LIVENESS = 1.0

    def __init__(
        self,
        store: Store,
        host: str,
        buffer: Buffer,
        step: str,
        fs_path: str,
        workers: int,
        owners: list[str],
        attempt: int,
        incarnation: int,
        mine: Status | None,
        on_progress: Callable[[Line], None],
        on_share: Callable[[ShareReport], None],
        timeout: float,
        run: Run,
        split: int = SPLIT,
    ) -> None:
        self.store, self.host, self.buffer, self.step = store, host, buffer, step
        self.direction = step.removeprefix("stage_")
        self.fs_path, self.workers, self.owners = fs_path, workers, owners
        self.attempt, self.incarnation, self.mine = attempt, incarnation, mine
        self.on_progress, self.on_share = on_progress, on_share
        self.timeout, self.run, self.split = timeout, run, split
        self.plan: StagePlan | None = None
        self.total = Total({"shares": [], "links": 0}, [], links=True)
        self.local: dict[int, Outcome | None] = {}  # share -> outcome, once ended
        self.done: list[int] = []  # of the local shares
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.raised: list[BaseException] = []  # what a thread met that must end the stage
        self.threads: list[threading.Thread] = []

    # -- the stage ---------------------------------------------------------------------------

    def stage(self) -> None:
        if not pairs_of(self.buffer, self.direction, self.fs_path):
            return
        timer = threading.Timer(
            self.timeout, self.run.cancel, args=(f"timed out after {self.timeout:.0f} s",)
        )
        timer.daemon = True
        timer.start()
        watch = self.store.wake_on_status(self.buffer.name, self.changed)
        try:
            self._copy()
            assert self.plan is not None
            finish(
                self.buffer,
                self.direction,
                self.fs_path,
                plan_dict(self.plan),
                self.timeout,
                self.run,
            )
            self.on_progress(self.total.sum())
            self._drop_proof()
            try:
                self.store.drop_stage_plan(self.buffer.name, self.step, self.host)
            except DacError as e:  # a plan left over is overwritten by the next, dropped at reap
                log.warning("buffer %s: %s plan not dropped: %s", self.buffer.name, self.step, e)
        finally:
            timer.cancel()
            watch.close()
            self.run.kill()
            for t in self.threads:
                t.join()

    def _copy(self) -> None:
        """Until every share is done, or the stage fails."""
        resumed = self._recorded()
        if resumed is not None:
            self._planned(resumed)
            log.info(
                "buffer %s: %s resumes its split across %s",
                self.buffer.name,
                self.step,
                ", ".join(sorted(set(resumed.owners))),
            )
            reported = self.mine.share if self.mine is not None else None
            done = set(reported.done) if reported and answers(reported, resumed) else set()
            self.done = sorted(done & set(resumed.owned_by(self.host)))
            for i in resumed.owned_by(self.host):
                if i not in done:
                    self._start(i)
                else:
                    self.total.add(i)
                    self.total.update(
                        i, {"bytes_done": resumed.shares[i][0], "files_done": resumed.shares[i][1]}
                    )
        else:
            lead_thread = threading.Thread(target=self._lead, name=f"lead-{self.buffer.name}")
            self.threads.append(lead_thread)
            lead_thread.start()
        looked = 0.0
        while True:
            self.changed.wait(0.5)
            self.changed.clear()
            if self.raised:
                raise self.raised[0]
            if self.run.reason is not None:
                self._fail(UserError(f"stage_{self.direction} {self.run.reason}"))
            with self.lock:
                plan, local = self.plan, dict(self.local)
            if plan is None:
                if 0 in local and local[0] is not None:  # prepare failed: one copier's line
                    check_result(self.direction, self.run, *local[0])
                    raise InternalError(f"stage_{self.direction}: the copier said no plan")
                continue
            for _i, out in sorted(local.items()):
                if out is not None and (
                    e := failure(self.direction, self.run, out, f" on {self.host}")
                ):
                    self._fail(e)
            done = {i for i, out in local.items() if out is not None} | set(self.done)
            try:
                statuses = self._statuses()
            except StoreUnavailable as e:  # etcd out of reach a moment: the stage's time bounds it
                log.warning("buffer %s: shares not looked at (%s)", self.buffer.name, e)
                continue
            unreached, moved = set(), False
            for host, status in statuses.items():
                report = status.share
                if host == self.host or not answers(report, plan):
                    continue
                if report.failed:
                    self._fail(_ERRORS.get(report.category, UserError)(report.failed))
                if report.unreached:
                    unreached.add(host)
                done |= set(report.done)
                moved |= self._theirs(plan, host, report)
            if moved:
                self.on_progress(self.total.sum())
            if done >= set(range(len(plan.shares))):
                return
            now = time.monotonic()
            if now - looked >= self.LIVENESS or unreached & set(plan.owners):
                looked = now
                try:
                    self._take_over(plan, done, unreached)
                except StoreUnavailable as e:
                    log.warning("buffer %s: owners not looked at (%s)", self.buffer.name, e)

    def _recorded(self) -> StagePlan | None:
        """This generation's plan, when this dacd recorded one before it restarted."""
        try:
            plan = self.store.stage_plan(self.buffer.name, self.step)
        except BadRecord as e:
            log.error("buffer %s: %s; planning the stage again", self.buffer.name, e)
            return None
        if (
            plan is None
            or plan.generation != self.buffer.generation
            or plan.primary != self.host
            or plan.fs_path != self.fs_path
            or plan.failed
            or len(plan.shares) != len(plan.owners)
        ):
            return None
        return plan

    def _statuses(self) -> dict[str, Status]:
        from daccore.records.models import Status

        out = {}
        for host, (_key, text) in self.store.status_texts(self.buffer.name).items():
            try:
                out[host] = Status.model_validate_json(text)
            except ValueError:
                continue  # another host's bad status: its shares are not reported done
        return out

    def _fail(self, error: DacError) -> None:
        """Every copier of the stage stopped, here and (through the record) on the other
        servers, and the stage failed with `error`'s one line."""
        self.run.kill()
        with self.lock:
            plan = self.plan
        if plan is not None:
            try:
                self._record(plan.model_copy(update={"failed": str(error)[:512] or "failed"}))
            except DacError as e:
                log.warning("buffer %s: the failed plan not recorded: %s", self.buffer.name, e)
            self._drop_proof()
        raise error

    def _drop_proof(self) -> None:
        """The plan's proof removed once its stage has ended (done or failed); left behind
        (a dacd killed), it goes with the filesystem at teardown."""
        assert self.plan is not None
        try:
            drop_proof(self.fs_path, self.plan.proof)
        except OSError as e:
            log.warning("buffer %s: the split's proof not removed: %s", self.buffer.name, e)

    def _theirs(self, plan: StagePlan, host: str, report: ShareReport) -> bool:
        """Another owner's figures for the shares the plan gives it, into the stage's
        progress: a share is counted from its owner alone, so a lost server's last figures
        for a share taken over are not counted twice. True when any moved."""
        moved = False
        for i, done, files, rate in report.parts:
            if i < len(plan.owners) and plan.owners[i] == host:
                got = {"bytes_done": done, "files_done": files, "rate": rate}
                if self.total.shares.get(i) != got:
                    self.total.update(i, got)
                    moved = True
        return moved

    # -- the shares copied here ----------------------------------------------------------------

    def _lead(self) -> None:
        """Prepare, the plan's record, then share 0 from the same walk."""
        try:
            out = lead(
                self.buffer,
                self.direction,
                self.fs_path,
                self.workers,
                len(self.owners),
                self._said,
                lambda p: self._progress(0, p),
                self.timeout,
                self.run,
                self.split,
            )
        except (Fenced, Superseded, StoreUnavailable) as e:  # the record could not be written
            self.raised.append(e)
            out = ({"error": str(e)}, "", 1)
        except Exception as e:  # noqa: BLE001 - reported as the lead's failure
            out = ({"error": f"copier failed: {type(e).__name__}: {e}"}, "", 1)
        self._ended(0, out)

    def _said(self, said: Plan) -> None:
        """The lead's plan: recorded, then each other owner woken."""
        from daccore.records.models import StagePlan

        try:
            proof = make_proof(self.fs_path)
        except OSError as e:
            raise AdminError(
                f"stage_{self.direction}: the split's proof not made at {self.fs_path}: "
                f"{e.strerror}"
            ) from e
        plan = StagePlan(
            buffer=self.buffer.name,
            step=self.step,
            generation=self.buffer.generation,
            attempt=self.attempt,
            primary=self.host,
            fs_path=self.fs_path,
            digest=said["digest"],
            links=said["links"],
            split=said["split"],
            shares=[tuple(s) for s in said["shares"]],
            owners=self.owners[: len(said["shares"])],
            proof=proof,
            updated_at=time.time(),
        )
        self._record(plan)
        self._planned(plan)
        with self.lock:
            self.local[0] = None
            self.total.add(0)
        for host in sorted(set(plan.owners) - {self.host}):
            self.store.wake(host, self.buffer.name)
        self.changed.set()

    def _planned(self, plan: StagePlan) -> None:
        with self.lock:
            self.plan = plan
            self.total.plan = plan_dict(plan)
            self.total.indexes = None  # the stage's progress: every share, whoever copies it

    def _record(self, plan: StagePlan) -> None:
        self.store.put_stage_plan(plan, self.incarnation)
        with self.lock:
            self.plan = plan

    def _start(self, i: int) -> None:
        with self.lock:
            self.local[i] = None
            self.total.add(i)
        self.total.update(i, {})  # copied again from its start here
        t = threading.Thread(target=self._share, args=(i,), name=f"share{i}-{self.buffer.name}")
        self.threads.append(t)
        t.start()

    def _share(self, i: int) -> None:
        assert self.plan is not None
        try:
            out = run_share(
                self.buffer,
                self.direction,
                self.fs_path,
                self.workers,
                plan_dict(self.plan),
                i,
                lambda p: self._progress(i, p),
                self.timeout,
                self.run,
            )
        except (Fenced, Superseded) as e:  # this host's status could not be written
            self.raised.append(e)
            out = ({"error": str(e)}, "", 1)
        except Exception as e:  # noqa: BLE001 - reported as this share's failure
            out = ({"error": f"copier failed: {type(e).__name__}: {e}"}, "", 1)
        self._ended(i, out)

    def _progress(self, i: int, p: Line) -> None:
        with self.lock:
            if self.plan is None:
                return
        self.on_progress(self.total.update(i, p))

    def _ended(self, i: int, out: Outcome) -> None:
        with self.lock:
            self.local[i] = out
            plan = self.plan
            ok = out[2] == 0 and "error" not in out[0] and out[0].get("done")
            if ok and i not in self.done:
                self.done.append(i)
            done = sorted(self.done)
        try:
            if plan is not None and ok:
                self.on_share(
                    ShareReport(
                        step=plan.step, generation=plan.generation, attempt=plan.attempt, done=done
                    )
                )
        except (Fenced, Superseded) as e:
            self.raised.append(e)
        finally:
            self.changed.set()

    # -- a lost server ---------------------------------------------------------------------------

    def _take_over(self, plan: StagePlan, done: set[int], unreached: set[str]) -> None:
        """The unfinished shares of owners whose lease lapsed, or who said they do not see the
        filesystem (`unreached`), each given to the least loaded live owner (this dacd on a
        tie): the record says so, the new owner is woken."""
        others = sorted(set(plan.owners) - {self.host} - unreached)
        live = (self.store.alive_among(others) if others else set()) | {self.host}
        lost = [i for i, h in enumerate(plan.owners) if h not in live and i not in done]
        if not lost:
            return
        load = {h: 0 for h in live if h in plan.owners or h == self.host}
        for i, h in enumerate(plan.owners):
            if h in load and i not in done:
                load[h] += plan.shares[i][0] + FILE_COST * plan.shares[i][1]
        owners = list(plan.owners)
        for i in sorted(lost, key=lambda i: -plan.shares[i][0]):
            to = min(load, key=lambda h: (load[h], h != self.host, h))
            log.warning(
                "buffer %s: %s share %d of %s server %s taken over by %s",
                self.buffer.name,
                self.step,
                i,
                "unreaching" if owners[i] in unreached else "lost",
                owners[i],
                to,
            )
            owners[i] = to
            load[to] += plan.shares[i][0] + FILE_COST * plan.shares[i][1]
        self._record(plan.model_copy(update={"owners": owners, "updated_at": time.time()}))
        for i in lost:
            if owners[i] == self.host:
                self._start(i)
        for host in sorted({owners[i] for i in lost} - {self.host}):
            self.store.wake(host, self.buffer.name)
