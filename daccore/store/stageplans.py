"""Split stages (issue 35): `stageplans/<buffer>/<step>`, the plan of a stage shared out among
the buffer's servers, written by the buffer's primary dacd alone, fenced on its lease and on
the spec's incarnation (as statuses are); and `stage-views/<host>`, which mount namespace a
dacd sees filesystems in, written by that dacd when it starts, so that a primary splits a stage
only across servers that see its filesystem where it does.

The plan's shares are reported done in each host's own status (`Status.share`); the plan holds
no file list (dacd/staging/share.py: every server deals the same shares from its own walk), so
it stays tens of bytes a server."""

from __future__ import annotations

from daccore.errors import Superseded
from daccore.etcd.types import Compare, delete_op, put_op, range_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import _dump
from daccore.store.leases import Leases

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.records.models import StagePlan

__all__ = ["StagePlans"]


class StagePlans(Leases):
    """Owns `stageplans/` and `stage-views/`: the primary's writes of a plan (`put_stage_plan`)
    and its drops, every server's read of one (`stage_plan_text`, unparsed: dacd checks it),
    and the views."""

    def put_stage_plan(self, plan: StagePlan, incarnation: int = 0) -> None:
        """Single writer (the primary's dacd): fenced on its lease when this store keeps it
        (Fenced once it lapsed) and, with `incarnation` (the spec's create_revision the
        primary read), on the spec: Superseded when that buffer was deleted or made anew."""
        same = (
            [Compare(self.keys.buffer(plan.buffer), "CREATE", incarnation)] if incarnation else []
        )
        if not self._fenced_txn(
            [plan.primary],
            same,
            [put_op(self.keys.stage_plan(plan.buffer, plan.step), _dump(plan))],
        ):
            raise Superseded(plan.buffer)

    def stage_plan_text(self, buffer: str, step: str) -> tuple[str, bytes] | None:
        """(key, the plan as etcd holds it), or None: for dacd, which checks it."""
        key = self.keys.stage_plan(buffer, step)
        kv = self.client.get(key)
        return (key, kv.value) if kv else None

    def stage_plan(self, buffer: str, step: str) -> StagePlan | None:
        """The plan, validated (BadRecord when it is not one)."""
        from daccore.records.models import StagePlan
        from daccore.store.base import _load

        kv = self.client.get(self.keys.stage_plan(buffer, step))
        return _load(StagePlan, kv) if kv else None

    def drop_stage_plan(self, buffer: str, step: str, primary: str) -> None:
        """The plan gone once its stage is done (fenced as its writes are)."""
        self._fenced_txn([primary], [], [delete_op(self.keys.stage_plan(buffer, step))])

    def drop_stage_plans(self, buffer: str, primary: str) -> None:
        """Every plan of `buffer` (its reap, by the primary)."""
        prefix = self.keys.buffer_stage_plans(buffer)
        self._fenced_txn([primary], [], [delete_op(prefix, prefix_end(prefix))])

    def put_stage_view(self, host: str, view: str) -> None:
        self.client.put(self.keys.stage_view(host), view)

    def stage_views(self, hosts: list[str]) -> dict[str, str]:
        """Host -> the view its dacd last wrote, for those of `hosts` that wrote one."""
        k = self.keys
        out: dict[str, str] = {}
        for start in range(0, len(hosts), 100):
            chunk = hosts[start : start + 100]
            r = self.client.txn([], [range_op(k.stage_view(h)) for h in chunk])
            for h, kvs in zip(chunk, r.ranges, strict=True):
                if kvs:
                    out[h] = kvs[0].value.decode("utf-8", "replace")
        return out

    def stage_plan_buffers(self) -> list[str]:
        """The buffers with a plan (an admin's look; dacd reads plans by name)."""
        kvs, _ = self.client.range(
            self.keys.stage_plans, prefix_end(self.keys.stage_plans), keys_only=True
        )
        return sorted({Keys.last(kv.key, self.keys.stage_plans).split("/")[0] for kv in kvs})
