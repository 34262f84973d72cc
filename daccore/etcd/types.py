"""What the etcd client and its transports share: the records a request and an answer are made
of, the errors, the transport interface, and what the store asks of a client (`EtcdApi`).
Standard library only, and cheap to import: the hooks that run inside slurmctld load it
(docs/performance.md)."""

from __future__ import annotations

from collections import namedtuple

from daccore.errors import InternalError

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Iterator, NamedTuple, Protocol, Sequence

    from daccore.etcd.stream import Watch

__all__ = [
    "KV",
    "Event",
    "TxnResult",
    "Compare",
    "Op",
    "WatchCompacted",
    "WatchMessage",
    "EtcdRequestError",
    "Unreachable",
    "absent",
    "mod_is",
    "put_op",
    "delete_op",
    "range_op",
    "TRANSPORTS",
    "key_bytes",
    "key_text",
]

TRANSPORTS = ("grpc", "http")


def key_bytes(key: str) -> bytes:
    """A key as etcd holds it. Keys are bytes there; one that is not UTF-8 (written by some
    other client, or a name from a command line) is held as surrogates, as Python holds such
    a file name (`surrogateescape`), so that it can be read, shown and deleted like any other."""
    return key.encode("utf-8", "surrogateescape")


def key_text(key: bytes) -> str:
    return key.decode("utf-8", "surrogateescape")


class EtcdRequestError(InternalError):
    """etcd answered, and refused the request."""

    def __init__(self, what: str, code: int | None, message: str):
        super().__init__(f"etcd refused {what}: {message} (code {code})")
        self.code, self.reason = code, message


class Unreachable(Exception):
    """A transport could not get an answer from its endpoint; the client tries the next one."""


class WatchCompacted(InternalError):
    """The watch's start revision is older than etcd's compaction: re-list, then watch anew."""

    def __init__(self, compact_revision: int):
        super().__init__(f"watch revision compacted; etcd keeps revisions from {compact_revision}")
        self.compact_revision = compact_revision


# Records are namedtuples, not dataclasses: this module is on the path of the hooks that run
# inside slurmctld, where importing `dataclasses` (18 ms) and defining each class (~1.4 ms)
# would be a visible share of the budget (docs/performance.md).

#: One key. An inventory builds thousands per read, and a tuple is the cheapest to build.
KV = namedtuple("KV", "key value create_revision mod_revision version lease", defaults=(0, 0))
#: One watch event: type is "put" or "delete".
Event = namedtuple("Event", "type kv")
#: A txn compare: target is CREATE (create_revision) or MOD (mod_revision); the test is ==.
Compare = namedtuple("Compare", "key target revision")
#: A txn op: kind is "put", "delete" or "range"; revision reads a range as of that revision;
#: min_mod_revision keeps only the keys changed at or after it.
Op = namedtuple(
    "Op",
    "kind key range_end value lease keys_only count_only revision min_mod_revision",
    defaults=(None, b"", 0, False, False, 0, 0),
)
#: ranges: the kvs of each range op of the branch that ran; counts: their counts, in order.
if TYPE_CHECKING:  # the same tuple with its fields typed, for mypy; at run time a plain namedtuple

    class TxnResult(NamedTuple):
        succeeded: bool
        revision: int
        ranges: Sequence[list[KV]] = ()
        counts: Sequence[int] = ()

else:
    TxnResult = namedtuple("TxnResult", "succeeded revision ranges counts", defaults=((), ()))


def absent(key: str) -> Compare:
    """The key does not exist (create_revision == 0)."""
    return Compare(key, "CREATE", 0)


def mod_is(key: str, revision: int) -> Compare:
    """The key was last changed at `revision` (compare-and-swap)."""
    return Compare(key, "MOD", revision)


def put_op(key: str, value: str | bytes, lease: int = 0) -> Op:
    return Op("put", key, None, value.encode() if isinstance(value, str) else value, lease)


def delete_op(key: str, range_end: str | None = None) -> Op:
    return Op("delete", key, range_end)


def range_op(
    key: str,
    range_end: str | None = None,
    keys_only: bool = False,
    count_only: bool = False,
    revision: int = 0,
    min_mod_revision: int = 0,
) -> Op:
    return Op(
        "range",
        key,
        range_end,
        keys_only=keys_only,
        count_only=count_only,
        revision=revision,
        min_mod_revision=min_mod_revision,
    )


class WatchMessage:
    """One response on a watch stream, whatever the transport."""

    __slots__ = ("revision", "events", "created", "compact_revision", "canceled", "reason")

    def __init__(
        self,
        revision: int,
        events: list[Event],
        created: bool = False,
        compact_revision: int = 0,
        canceled: bool = False,
        reason: str = "",
    ):
        self.revision, self.events, self.created = revision, events, created
        self.compact_revision, self.canceled, self.reason = compact_revision, canceled, reason


if TYPE_CHECKING:

    class WatchStream(Protocol):
        def __iter__(self) -> Iterator[WatchMessage]: ...
        def close(self) -> None: ...

    class Transport(Protocol):
        """One endpoint. Methods raise Unreachable or EtcdRequestError, nothing else."""

        endpoint: str

        def range(
            self, key: str, range_end: str | None, keys_only: bool, revision: int
        ) -> tuple[list[KV], int]: ...
        def put(self, key: str, value: bytes, lease: int) -> int: ...
        def delete(self, key: str, range_end: str | None) -> int: ...
        def txn(
            self, compare: list[Compare], success: list[Op], failure: list[Op]
        ) -> TxnResult: ...
        def compact(self, revision: int) -> None: ...
        def lease_grant(self, ttl: int) -> int: ...
        def lease_keepalive(self, lease: int) -> int: ...
        def lease_revoke(self, lease: int) -> None: ...
        def lease_time_to_live(self, lease: int) -> tuple[int, int]: ...
        def watch(self, key: str, range_end: str | None, start_revision: int) -> WatchStream: ...
        def close(self) -> None: ...

    class EtcdReads(Protocol):
        """The reads `daccore.store` makes of its client, with `EtcdClient`'s signatures. The
        answerer's mirror answers these alone (dacservice/answerer/mirror.py)."""

        endpoints: list[str]

        def range(
            self,
            key: str,
            range_end: str | None = None,
            *,
            keys_only: bool = False,
            revision: int = 0,
        ) -> tuple[list[KV], int]: ...
        def get(self, key: str) -> KV | None: ...
        def txn(
            self, compare: list[Compare], success: list[Op], failure: list[Op] | None = None
        ) -> TxnResult: ...

    class EtcdApi(EtcdReads, Protocol):
        """All `daccore.store` (and `daccore.etcd.stream.LeaseKeeper`) asks of its client:
        `EtcdClient` is one, structurally; the answerer's mirror refuses all but the reads."""

        timeout: float

        def put(self, key: str, value: str | bytes, lease: int = 0) -> int: ...
        def delete(self, key: str, range_end: str | None = None) -> int: ...
        def lease_grant(self, ttl: int) -> int: ...
        def lease_keepalive(self, lease: int) -> int: ...
        def lease_time_to_live(self, lease: int) -> tuple[int, int]: ...
        def lease_revoke(self, lease: int) -> None: ...
        def watch(
            self, key: str, range_end: str | None = None, start_revision: int = 0
        ) -> Watch: ...
