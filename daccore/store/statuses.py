"""Statuses, `status/<name>/<host>`: what each host's dacd reports of its part of a buffer,
written by that dacd alone, fenced on its lease and on the spec it acted on."""

from __future__ import annotations

import json
import threading

from daccore.errors import DacError, Superseded
from daccore.etcd.types import Compare, put_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import _MAX_TXN_OPS, _doc, _dump
from daccore.store.leases import Leases

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Iterator

    from daccore.etcd.stream import Watch
    from daccore.records.buffer_doc import Doc
    from daccore.records.models import Status
    from daccore.store.base import Change

__all__ = ["BufferStatuses"]


class BufferStatuses(Leases):
    """Owns `status/`: the writes (`put_status`, `put_statuses`), the reads in three shapes
    as for specs, and the watches (`watch_statuses`, `wake_on_status` for a waiting Slurm
    call)."""

    def put_status(self, status: Status, incarnation: int = 0) -> None:
        """Single writer per key (the host's own dacd), so no compare but the fence's and,
        with `incarnation` (the spec's create_revision when the writer read it), the spec's:
        Superseded when that buffer was deleted or created anew since. Without it, the last
        write of a step for a buffer Slurm tore down and set up again (same name) could land
        in the new buffer's statuses and count for it."""
        self.put_statuses([status], incarnation)

    def put_statuses(self, statuses: list[Status], incarnation: int = 0) -> None:
        """Several hosts' statuses of one buffer (a lustre or daos buffer's primary writes
        every host's): as few transactions as etcd allows, not one request per host."""
        (name,) = {s.buffer for s in statuses}
        ops = [put_op(self.keys.status(name, s.host), _dump(s)) for s in statuses]
        hosts = sorted({s.host for s in statuses} & set(self._fences))  # the writer's own
        same = [Compare(self.keys.buffer(name), "CREATE", incarnation)] if incarnation else []
        step = _MAX_TXN_OPS - len(hosts) - len(same)  # room for the compares
        for start in range(0, len(ops), step):
            if not self._fenced_txn(hosts, same, ops[start : start + step]):
                raise Superseded(name)

    def statuses(self, buffer: str) -> dict[str, Status]:
        from daccore.records.models import Status

        return {s.host: s for s in self._list(Status, self.keys.buffer_statuses(buffer))}

    def status_texts(self, buffer: str) -> dict[str, tuple[str, str]]:
        """Host -> (key, status as etcd holds it, unparsed): for dacd (see buffer_text)."""
        prefix = self.keys.buffer_statuses(buffer)
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return {Keys.last(kv.key, prefix): (kv.key, kv.value) for kv in kvs}

    def status_docs(self, buffer: str) -> dict[str, Doc]:
        """Host -> status as JSON, for the Slurm functions (see buffer_doc)."""
        prefix = self.keys.buffer_statuses(buffer)
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return {Keys.last(kv.key, prefix): json.loads(kv.value) for kv in kvs}

    def all_status_docs(self) -> dict[str, dict[str, Doc]]:
        """Buffer -> host -> status as JSON, in one read (dwstat's views of every buffer);
        a status that is not a JSON object is left out."""
        kvs, _ = self.client.range(self.keys.statuses, prefix_end(self.keys.statuses))
        found: dict[str, dict[str, Doc]] = {}
        for kv in kvs:
            buffer, _, host = Keys.last(kv.key, self.keys.statuses).partition("/")
            doc = _doc(kv.value)
            if doc is not None and host:
                found.setdefault(buffer, {})[host] = doc
        return found

    def wake_on_status(self, buffer: str, wake: threading.Event) -> Watch:
        """Set `wake` whenever a host writes `buffer`'s status, until the returned Watch is
        closed: a waiting Slurm call learns a step ended at once, not at its next poll. Best
        effort (the waiter polls too), so a broken watch just stops waking."""
        prefix = self.keys.buffer_statuses(buffer)
        w = self.client.watch(prefix, prefix_end(prefix))

        def follow() -> None:
            try:
                for _ in w:
                    wake.set()
            except DacError:
                pass

        threading.Thread(target=follow, name=f"wake-{buffer}", daemon=True).start()
        return w

    def watch_statuses(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        from daccore.records.models import Status

        return self._watch(Status, self.keys.statuses, start_revision)
