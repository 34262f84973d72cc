"""What dead nodes owe: `owed/<node>/<name>`, written by a buffer's primary dacd for each
compute node that did not answer at teardown, dropped once the node has unmounted (or an
admin forgets it)."""

from __future__ import annotations

from daccore.errors import BadRecord
from daccore.records.keys import prefix_end
from daccore.store.base import Connection, _dump, _load

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.records.models import Owed

__all__ = ["OwedMounts"]


class OwedMounts(Connection):
    """Owns `owed/`: put, list (every node's or one's), drop."""

    def put_owed(self, owed: Owed) -> None:
        self.client.put(self.keys.owed(owed.node, owed.buffer), _dump(owed))

    def owed(self, node: str | None = None) -> list[Owed]:
        """Every node's debts (or one node's), in key order; a record that is not one is
        skipped (an admin sees it with etcdctl; dacd never acts on it)."""
        from daccore.records.models import Owed

        prefix = self.keys.owed_all + (f"{node}/" if node else "")
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        out = []
        for kv in kvs:
            try:
                out.append(_load(Owed, kv))
            except BadRecord:
                continue
        return out

    def drop_owed(self, node: str, buffer: str | None = None) -> int:
        """Forget what `node` owes (for `buffer`, or all): how many records went."""
        if buffer is not None:
            return self.client.delete(self.keys.owed(node, buffer))
        prefix = f"{self.keys.owed_all}{node}/"
        return self.client.delete(prefix, prefix_end(prefix))
