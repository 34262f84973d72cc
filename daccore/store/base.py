"""The store's foundation: the etcd connection and the key layout, construction from the
settings, the helpers every concern uses to read and write records (validated models, plain
JSON, compare-and-swap), and the shapes reads return.

The record models are imported on first use, in each method that needs one (`from
daccore.records.models import ...` in the function): pydantic costs ~150 ms to import, and the
Slurm hooks that run inside slurmctld read what they need without it (`*_json`, `*_doc`)."""

from __future__ import annotations

import json
from collections import namedtuple

from daccore.errors import BadRecord, Conflict
from daccore.etcd.client import EtcdClient
from daccore.etcd.types import KV, Compare, Op, absent, key_bytes, mod_is, put_op, range_op
from daccore.records.keys import Keys, prefix_end

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Callable, Iterator, Self, TypeVar

    from pydantic import BaseModel

    from daccore.etcd.auth import Credential
    from daccore.etcd.stream import Watch
    from daccore.etcd.types import EtcdApi
    from daccore.records.buffer_doc import Doc
    from daccore.settings.cache import Json
    from daccore.settings.config import EtcdSettings

    R = TypeVar("R", bound=BaseModel)

__all__ = ["Connection", "Versioned", "Change", "client_from_dict"]


#: etcd refuses transactions of more than --max-txn-ops operations (default 128) on either
#: side (compares, success ops, failure ops).
_MAX_TXN_OPS = 100


class _GuardFailed(Exception):
    def __init__(self, compares: list[Compare]):
        self.compares = compares


#: A record with the mod_revision to compare against when writing it back.
#: `create_revision` tells one incarnation of a key from another of the same name
Versioned = namedtuple("Versioned", "record mod_revision create_revision", defaults=(0,))
#: One event of a watch: `record` is None when the key was deleted.
Change = namedtuple("Change", "name record revision bad", defaults=(False,))


class Connection:
    """Owns the client and the key layout, and the generic record access the concerns share:
    `_list`, `_update` (read-modify-write by compare-and-swap), `_watch`. Constructing one
    does no I/O."""

    def __init__(self, client: EtcdApi, prefix: str = "/dac/v1/"):
        self.client = client
        self.keys = Keys(prefix)

    @classmethod
    def from_settings(
        cls, etcd: EtcdSettings, transport: str | None = None, role: str = "admin"
    ) -> Self:
        """`transport` overrides the configured one; `role` is the etcd identity to act as:
        dacd (storage servers), slurm (the Slurm hooks), admin (root on admin hosts)."""
        client = EtcdClient(
            etcd.urls,
            cacert=etcd.cacert,
            cert=etcd.cert,
            key=etcd.key,
            timeout=etcd.timeout,
            transport=transport or etcd.transport,
            credential=_credential(etcd.credentials_dir, role, cache=False),
        )
        return cls(client, etcd.prefix)

    @classmethod
    def from_dict(
        cls,
        etcd: Json,
        transport: str | None = None,
        max_timeout: float | None = None,
        role: str = "slurm",
    ) -> Self:
        """From `config_cache.load_settings()["etcd"]`, for the hooks inside slurmctld: one
        process per call, so the role's token is cached on disk (daccore.etcd.auth)."""
        return cls(client_from_dict(etcd, transport, max_timeout, role), etcd["prefix"])

    def _list(self, model: type[R], prefix: str) -> list[R]:
        kvs, _ = self.client.range(prefix, prefix_end(prefix))
        return [_load(model, kv) for kv in kvs]

    def _update(
        self,
        model: type[R],
        key: str,
        change: Callable[[R | None], R],
        also: Callable[[R], Op] | None = None,
        guards: Callable[[R | None], list[Compare]] | None = None,
        attempts: int = 20,
    ) -> R:
        """Read-modify-write with compare-and-swap, retried when another writer got there
        first. `also(new)` is one more op committed in the same transaction; `guards(old)`
        are more compares, whose failure raises _GuardFailed instead of retrying."""
        for _ in range(attempts):
            kv = self.client.get(key)
            old = _load(model, kv) if kv else None
            new = change(old)
            cas = mod_is(key, kv.mod_revision) if kv else absent(key)
            extra = guards(old) if guards else []
            ops = [put_op(key, _dump(new))] + ([also(new)] if also else [])
            r = self.client.txn([cas] + extra, ops, [range_op(key, keys_only=True)])
            if r.succeeded:
                return new
            current = r.ranges[0][0].mod_revision if r.ranges and r.ranges[0] else 0
            if extra and current == (kv.mod_revision if kv else 0):
                raise _GuardFailed(extra)
        raise Conflict(f"{key} kept changing under {attempts} attempts to update it")

    def _watch(
        self, model: type[R], prefix: str, start_revision: int
    ) -> tuple[Watch, Iterator[Change]]:
        w = self.client.watch(prefix, prefix_end(prefix), start_revision)

        def changes() -> Iterator[Change]:
            for ev in w:
                record = _load(model, ev.kv) if ev.type == "put" else None
                yield Change(Keys.last(ev.kv.key, prefix), record, ev.kv.mod_revision)

        return w, changes()


def _claimant(kv: KV) -> str | None:
    """The buffer a claim key names; None when it is not a claim record."""
    c = _claim_of(kv)
    return c[0] if c else None


def _claim_of(kv: KV) -> tuple[str, str | None] | None:
    """(buffer, primary host or None) of a claim record; None when it is not one."""
    doc = _doc(kv.value)
    if doc is None or not isinstance(doc.get("buffer"), str):
        return None
    primary = doc.get("primary")
    return doc["buffer"], primary if isinstance(primary, str) else None


def client_from_dict(
    etcd: Json, transport: str | None = None, max_timeout: float | None = None, role: str = "slurm"
) -> EtcdClient:
    """`Connection.from_dict`'s client, for a caller that needs the EtcdClient itself (the
    answerer's mirror watches through it, dacservice/answerer/mirror.py)."""
    timeout = etcd["timeout"] if max_timeout is None else min(etcd["timeout"], max_timeout)
    return EtcdClient(
        etcd["urls"],
        cacert=etcd.get("cacert"),
        cert=etcd.get("cert"),
        key=etcd.get("key"),
        timeout=timeout,
        transport=transport or etcd["transport"],
        credential=_credential(etcd["credentials_dir"], role, cache=True),
    )


def _credential(directory: str, role: str, cache: bool) -> Credential:
    from daccore.etcd.auth import ROLES, Credential

    if role not in ROLES:
        raise ValueError(f"unknown etcd role '{role}' (choose {', '.join(ROLES)})")
    return Credential(f"{directory.rstrip('/')}/{role}", role, cache=cache)


def _dump(record: BaseModel) -> str:
    return record.model_dump_json()


def _load(model: type[R], kv: KV) -> R:
    from pydantic import ValidationError

    try:
        return model.model_validate_json(kv.value)
    except ValidationError as e:
        raise BadRecord(kv.key, model.__name__, e.errors()[0]["msg"]) from e


def _named(kvs: list[KV], prefix: str) -> list[bytes]:
    """The values of `kvs` that name their own key, as every record dac writes does (its
    first field): a record under another key (`hosts/x` holding host `dac1`'s record) would
    count a host or pool twice. A bytes comparison, not a parse: the pools hook reads these."""
    return [
        kv.value
        for kv in kvs
        if kv.value.startswith(b'{"name":"%s"' % key_bytes(Keys.last(kv.key, prefix)))
    ]


def _doc(value: bytes) -> Doc | None:
    """A record read as plain JSON: the object, or None when it is not one (not JSON, not
    UTF-8, nested past the parser's depth: RecursionError is no ValueError)."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
