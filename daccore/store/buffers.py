"""Buffer specs, `buffers/<name>`: read in three shapes (validated, plain JSON for the Slurm
hooks, raw text for dacd), changed by compare-and-swap with their work keys, deleted with their
claims, statuses and work keys."""

from __future__ import annotations

import json

from daccore.errors import Conflict
from daccore.etcd.types import delete_op, mod_is, put_op, range_op
from daccore.records.keys import Keys, prefix_end
from daccore.store.base import _MAX_TXN_OPS, Versioned, _doc, _load
from daccore.store.claims import CLAIMS_PER_TXN, BrickClaims
from daccore.store.leases import Leases

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Iterator

    from daccore.etcd.stream import Watch
    from daccore.records.buffer_doc import Doc
    from daccore.records.models import Buffer
    from daccore.store.base import Change

__all__ = ["BufferSpecs"]


class BufferSpecs(BrickClaims, Leases):
    """Owns `buffers/`: reading specs (`buffer`, `buffer_text`, `buffer_doc`, ...), writing
    them back (`update_buffer`), deleting them (`delete_buffer`), watching them, and what is
    summed over them (`persistent_usage`, `buffer_owners`). Creating one is `create_buffer`
    (BrickClaims): a spec is created only once every one of its claims is held."""

    def buffer(self, name: str) -> Versioned | None:
        from daccore.records.models import Buffer

        kv = self.client.get(self.keys.buffer(name))
        return Versioned(_load(Buffer, kv), kv.mod_revision, kv.create_revision) if kv else None

    def buffer_text(self, name: str) -> Versioned | None:
        """The spec as etcd holds it, unparsed, with its key: for dacd, which checks every
        record itself (daccore.rules.trust) so that a bad one is skipped, not raised."""
        key = self.keys.buffer(name)
        kv = self.client.get(key)
        return Versioned((key, kv.value), kv.mod_revision, kv.create_revision) if kv else None

    def buffer_names(self) -> tuple[list[str], int]:
        """Every buffer's name, and the revision of the read (to watch from)."""
        kvs, revision = self.client.range(
            self.keys.buffers, prefix_end(self.keys.buffers), keys_only=True
        )
        return [Keys.last(kv.key, self.keys.buffers) for kv in kvs], revision

    def spec_revisions(self, names: list[str]) -> dict[str, int]:
        """Buffer name -> its spec's mod_revision, for those of `names` that exist: keys only,
        as many to a transaction as etcd allows (dacd's periodic resync)."""
        out = {}
        for start in range(0, len(names), _MAX_TXN_OPS):
            chunk = names[start : start + _MAX_TXN_OPS]
            r = self.client.txn([], [range_op(self.keys.buffer(n), keys_only=True) for n in chunk])
            out.update(
                {n: kvs[0].mod_revision for n, kvs in zip(chunk, r.ranges, strict=True) if kvs}
            )
        return out

    def persistent_usage(
        self, uid: int | None = None, gid: int | None = None
    ) -> dict[str, list[int]]:
        """{pool: [buffers, bytes]} of the persistent buffers owned by `uid` (or of group
        `gid`), from the specs as JSON."""
        usage: dict[str, list[int]] = {}
        for doc in self.buffer_docs().values():
            if (
                not doc.get("persistent")
                or (uid is not None and doc.get("owner_uid") != uid)
                or (gid is not None and doc.get("owner_gid") != gid)
            ):
                continue
            try:
                pool = doc["request"]["pool"]
                size = sum(b["capacity"] for b in doc["allocation"]["bricks"])
            except (KeyError, TypeError):
                continue
            u = usage.setdefault(pool, [0, 0])
            u[0], u[1] = u[0] + 1, u[1] + size
        return usage

    def buffer_owners(self) -> dict[str, int]:
        """Buffer name -> owner uid, read without validating every spec (job_process)."""
        return {
            name: doc["owner_uid"]
            for name, doc in self.buffer_docs().items()
            if isinstance(doc.get("owner_uid"), int)
        }

    # The Slurm functions read and change specs as plain JSON, unvalidated: importing pydantic
    # would cost each call 0.2 s (docs/performance.md). Specs are written whole by validated
    # code; what those functions change (desired state, attachments, generation) they take
    # from validated input, as a pydantic model_copy would, which does not validate either.

    def buffer_json(self, name: str) -> Doc | None:
        current = self.buffer_doc(name)
        return current.record if current else None

    def buffer_doc(self, name: str) -> Versioned | None:
        """The spec as JSON with its revision, for a compare-and-swap."""
        kv = self.client.get(self.keys.buffer(name))
        return Versioned(json.loads(kv.value), kv.mod_revision, kv.create_revision) if kv else None

    def buffer_docs(self) -> dict[str, Doc]:
        """Every spec that is a JSON object: one that is not is no buffer any Slurm call can
        act on, and must not stop the calls for the others (dacd logs it, docs/security.md)."""
        kvs, _ = self.client.range(self.keys.buffers, prefix_end(self.keys.buffers))
        docs = {}
        for kv in kvs:
            doc = _doc(kv.value)
            if doc is not None:
                docs[Keys.last(kv.key, self.keys.buffers)] = doc
        return docs

    def buffers(self) -> dict[str, Buffer]:
        from daccore.records.models import Buffer

        return {b.name: b for b in self._list(Buffer, self.keys.buffers)}

    def update_buffer(self, buffer: Buffer, mod_revision: int) -> int:
        """Compare-and-swap the spec; Conflict when someone changed it since `mod_revision`."""
        return self.update_buffer_doc(buffer.model_dump(mode="json"), mod_revision)

    def update_buffer_doc(self, doc: Doc, mod_revision: int) -> int:
        """update_buffer of a spec in JSON; its work keys are put in the same transaction
        (those beyond one transaction's worth right after: `_wake_rest`)."""
        key = self.keys.buffer(doc["name"])
        alloc = doc["allocation"]
        work = self._work_puts(
            doc["name"],
            doc["generation"],
            self.work_hosts(
                doc["request"]["pool"], alloc["primary_host"], (b["host"] for b in alloc["bricks"])
            ),
        )
        room = _MAX_TXN_OPS - 1
        r = self.client.txn(
            [mod_is(key, mod_revision)],
            [put_op(key, json.dumps(doc, separators=(",", ":")))] + work[:room],
        )
        if not r.succeeded:
            raise Conflict(f"buffer '{doc['name']}' changed since revision {mod_revision}")
        self._wake_rest(doc["name"], r.revision, work[room:])
        return r.revision

    def delete_buffer(self, name: str, mod_revision: int) -> None:
        """Release the buffer's claims and drop its spec and statuses: one transaction when
        its claims fit in one (CLAIMS_PER_TXN); else the claims first, in chunks, each
        comparing the spec unchanged, then the spec and statuses. A call cut short leaves the
        spec, so the next pass (dacd's reap, or forget) finishes it; a brick freed meanwhile
        may be claimed again at once, which is safe since every host has deleted the
        buffer by then."""
        current = self.buffer(name)
        if current is None:
            return
        buf: Buffer = current.record
        k = self.keys
        keys = self._claim_keys(buf.request.pool, buf.allocation.bricks, buf.allocation.mgs_host)
        work = [
            delete_op(k.work(h, name))
            for h in self.work_hosts(
                buf.request.pool, buf.allocation.primary_host, buf.allocation.hosts
            )
        ]
        spec = mod_is(k.buffer(name), mod_revision)
        changed = f"buffer '{name}' changed since revision {mod_revision}"
        fence = [buf.allocation.primary_host]
        if len(keys) > CLAIMS_PER_TXN or len(keys) + 2 + len(work) > _MAX_TXN_OPS:
            if current.mod_revision != mod_revision:
                raise Conflict(changed)
            self._release(name, keys, spec)
            keys = []
        # Work keys beyond one transaction (a local buffer over ~100 hosts) go before the
        # spec, each chunk comparing it unchanged: a pass cut short leaves the spec, and the
        # next pass finishes; a work key never outlives its spec.
        room = _MAX_TXN_OPS - 2 - len(keys)
        for start in range(room, len(work), _MAX_TXN_OPS):
            if not self._fenced_txn(fence, [spec], work[start : start + _MAX_TXN_OPS]):
                raise Conflict(changed)
        if not self._fenced_txn(
            fence,
            [spec],
            [delete_op(c) for c in keys]
            + work[:room]
            + [
                delete_op(k.buffer_statuses(name), prefix_end(k.buffer_statuses(name))),
                delete_op(k.buffer(name)),
            ],
        ):
            raise Conflict(changed)

    def watch_buffers(self, start_revision: int = 0) -> tuple[Watch, Iterator[Change]]:
        """Every change to a buffer spec from `start_revision` on; the Watch closes it."""
        from daccore.records.models import Buffer

        return self._watch(Buffer, self.keys.buffers, start_revision)
