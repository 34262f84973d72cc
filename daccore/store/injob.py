"""In-job stages: `stages/<host>/<job>/<id>` (what a running job asked for, written by the
user service), `stage-status/<host>/<job>/<id>` (what the dacd of <host> observed, fenced on
its lease) and `stage-index/<job>` (the job's last id and the hosts holding its stages,
written with each new stage in one transaction: ids stay unique and the job's cap on open
stages holds when requests race)."""

from __future__ import annotations

from daccore.errors import BadRecord, Conflict, UserError
from daccore.etcd.types import Compare, absent, delete_op, mod_is, put_op, range_op
from daccore.records import bounds
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import _doc, _dump, _load
from daccore.store.leases import Leases

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Callable, Iterator, TypeVar

    from pydantic import BaseModel

    from daccore.etcd.stream import Watch
    from daccore.etcd.types import KV
    from daccore.records.buffer_doc import Doc
    from daccore.records.models import InJobStage, InJobStageStatus
    from daccore.store.base import Change

    R = TypeVar("R", bound=BaseModel)

__all__ = ["InJobStages"]


class InJobStages(Leases):
    """Owns `stages/`, `stage-status/` and `stage-index/`: a stage added under the job's cap,
    a job's stages with their statuses, a cancel, and dacd's reads, watch, status writes and
    drops."""

    # -- the user service --------------------------------------------------------------------

    def add_stage(
        self,
        job: str,
        host: str,
        make: Callable[[int], InJobStage],
        open_cap: int,
        attempts: int = 20,
    ) -> InJobStage:
        """The stage `make(id)` (id: the job's next) put for `host`'s dacd, unless the job
        has `open_cap` stages queued or running already (UserError); retried when another
        request of the job got there first."""
        from daccore.records.models import StageIndex

        key = self.keys.stage_index(job)
        hosts = [host]  # the hosts read with the index: the job's own, then any it names
        for _ in range(attempts):
            # the index and the stages it counts in one read, so the count is the index's
            # own (the request's round trips are its latency: docs/performance.md)
            ops = [range_op(key)]
            for h in hosts:
                for prefix in (self.keys.job_stages(h, job), self.keys.job_stage_statuses(h, job)):
                    ops.append(range_op(prefix, prefix_end(prefix)))
            r = self.client.txn([], ops)
            kv = r.ranges[0][0] if r.ranges[0] else None
            index = _load(StageIndex, kv) if kv else StageIndex(job=job)
            if set(index.hosts) - set(hosts):
                hosts = sorted({*index.hosts, host})
                continue
            pairs = []
            for i in range(len(hosts)):
                pairs += self._pairs(r.ranges[1 + 2 * i], r.ranges[2 + 2 * i])
            open_ = [s for s, st in pairs if st is None or not st.state.final]
            if len(open_) >= open_cap:
                raise UserError(
                    f"job {job} has {len(open_)} stages queued or running, its most: wait for "
                    "one to end (dacctl stage wait) or cancel one"
                )
            every = sorted({*index.hosts, host})
            if len(every) > bounds.MAX_INJOB_HOSTS:
                raise UserError(
                    f"job {job} has stages on {len(index.hosts)} servers already, its most"
                )
            stage = make(index.last + 1)
            new = index.model_copy(update={"last": stage.id, "hosts": every})
            skey = self.keys.stage(host, job, stage.id)
            r = self.client.txn(
                [mod_is(key, kv.mod_revision) if kv else absent(key), absent(skey)],
                [put_op(key, _dump(new)), put_op(skey, _dump(stage))],
            )
            if r.succeeded:
                return stage
        raise Conflict(f"{key} kept changing under {attempts} attempts to add a stage")

    def stage_hosts(self, job: str) -> list[str]:
        from daccore.records.models import StageIndex

        kv = self.client.get(self.keys.stage_index(job))
        return _load(StageIndex, kv).hosts if kv else []

    def job_stages(
        self, job: str, hosts: list[str] | None = None
    ) -> list[tuple[InJobStage, InJobStageStatus | None]]:
        """The job's stages, each with its dacd's status (None before the first), by id."""

        out = []
        for host in self.stage_hosts(job) if hosts is None else hosts:
            stages, statuses = (
                self.keys.job_stages(host, job),
                self.keys.job_stage_statuses(host, job),
            )
            out += self._pairs(
                self.client.range(stages, prefix_end(stages))[0],
                self.client.range(statuses, prefix_end(statuses))[0],
            )
        return sorted(out, key=lambda pair: pair[0].id)

    @staticmethod
    def _pairs(
        stages: list[KV], statuses: list[KV]
    ) -> list[tuple[InJobStage, InJobStageStatus | None]]:
        """Each stage record with its status, records that are not one left out."""
        from daccore.records.models import InJobStage, InJobStageStatus

        found = {s.id: s for s in _valid_all(InJobStageStatus, statuses)}
        return [(s, found.get(s.id)) for s in _valid_all(InJobStage, stages)]

    def job_stage_docs(self, job: str) -> list[tuple[Doc, Doc | None]]:
        """The job's stages as plain JSON (request, status or None), by id: for bbstat, which
        runs without pydantic; a value that is not a JSON object is left out."""
        kv = self.client.get(self.keys.stage_index(job))
        index = _doc(kv.value) if kv else None
        hosts = index.get("hosts") if index else None
        out: list[tuple[Doc, Doc | None]] = []
        for host in hosts if isinstance(hosts, list) else []:
            if not isinstance(host, str):
                continue
            found = {}
            for prefix in (
                self.keys.job_stages(host, job),
                self.keys.job_stage_statuses(host, job),
            ):
                kvs, _ = self.client.range(prefix, prefix_end(prefix))
                found[prefix] = {Keys.last(kv.key, prefix): _doc(kv.value) for kv in kvs}
            requests, statuses = found.values()
            out += [(r, statuses.get(k)) for k, r in sorted(requests.items()) if r is not None]
        return sorted(out, key=lambda pair: pair[0].get("id") or 0)

    def cancel_stage(self, stage: InJobStage) -> None:
        """Mark `stage` cancelled, for its dacd to stop (a no-op once it is marked)."""
        from daccore.records.models import InJobStage

        self._update(
            InJobStage,
            self.keys.stage(stage.host, stage.job, stage.id),
            lambda old: (old or stage).model_copy(update={"cancel": True}),
        )

    # -- dacd ----------------------------------------------------------------------------------

    def host_stage_texts(self, host: str) -> tuple[list[tuple[str, bytes, int]], int]:
        """(key, value, create_revision) of every stage for `host`, unparsed (dacd checks
        each), and the revision read at."""
        prefix = self.keys.host_stages(host)
        kvs, revision = self.client.range(prefix, prefix_end(prefix))
        return [(kv.key, kv.value, kv.create_revision) for kv in kvs], revision

    def stage_text(self, host: str, job: str, id: int) -> tuple[bytes, int] | None:
        """(value, create_revision) of one stage for `host`, unparsed; None when gone."""
        kv = self.client.get(self.keys.stage(host, job, id))
        return (kv.value, kv.create_revision) if kv else None

    def stage_status_of(self, host: str, job: str, id: int) -> InJobStageStatus | None:
        from daccore.records.models import InJobStageStatus

        kv = self.client.get(self.keys.stage_status(host, job, id))
        try:
            return _load(InJobStageStatus, kv) if kv else None
        except BadRecord:
            return None

    def put_stage_status(self, status: InJobStageStatus, incarnation: int) -> None:
        """Fenced on the host's lease, and only while the request it answers is the one
        created at `incarnation`: a status never outlives its request (a dropped job's
        stages stay dropped)."""
        key = self.keys.stage(status.host, status.job, status.id)
        ops = [put_op(self.keys.stage_status(status.host, status.job, status.id), _dump(status))]
        if not self._fenced_txn([status.host], [Compare(key, "CREATE", incarnation)], ops):
            raise Conflict(f"stage {status.id} of job {status.job} is gone: status not written")

    def drop_stages(self, host: str, job: str, ids: list[int]) -> None:
        """The requests and statuses of `ids`, gone (dacd: finished records past the newest)."""
        for start in range(0, len(ids), 50):
            self.client.txn(
                [],
                [
                    op
                    for id in ids[start : start + 50]
                    for op in (
                        delete_op(self.keys.stage(host, job, id)),
                        delete_op(self.keys.stage_status(host, job, id)),
                    )
                ],
            )

    def drop_job_stages(self, host: str, job: str) -> None:
        """Every stage of `job` on `host`, and the job's index: its buffer is gone."""
        a, b = self.keys.job_stages(host, job), self.keys.job_stage_statuses(host, job)
        self.client.txn(
            [],
            [
                delete_op(a, prefix_end(a)),
                delete_op(b, prefix_end(b)),
                delete_op(self.keys.stage_index(job)),
            ],
        )

    def watch_host_stages(self, host: str, start_revision: int) -> tuple[Watch, Iterator[Change]]:
        """Changes of `host`'s stages: `name` is `<job>/<id>`, `record` the raw value or
        None when deleted (dacd parses it)."""
        from daccore.store.base import Change

        prefix = self.keys.host_stages(host)
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)
        return w, (
            Change(
                Keys.last(ev.kv.key, prefix),
                ev.kv.value if ev.type == "put" else None,
                ev.kv.mod_revision,
            )
            for ev in w
        )


def _valid_all(model: type[R], kvs: list[KV]) -> list[R]:
    out = []
    for kv in kvs:
        try:
            out.append(_load(model, kv))
        except BadRecord:
            continue
    return out
