"""dac's etcd client: one API over two transports, with bounded retry and endpoint failover.

Two transports, because the two kinds of caller pull in opposite directions (measured,
docs/performance.md):

- `grpc` (default; `daccore.etcd_grpc`): etcd's native protocol, through the generated stubs
  that aetcd ships. At 1,000 hosts x 24 bricks it reads the whole inventory in ~40 ms, where the
  JSON gateway spends ~250 ms marshalling one JSON object per key. Importing grpc costs
  ~150 ms, which a daemon or an admin command pays once.
- `http` (`daccore.etcd_http`): etcd's JSON gateway over the standard library. Nothing to
  import: what the hooks that run inside slurmctld (job_process, pools, paths) use.

Only `daccore.store` uses this module. A request that cannot reach any endpoint is retried with
backoff for at most `timeout` seconds, then raises one `StoreUnavailable` naming the endpoints;
etcd refusing a request raises `EtcdRequestError`.
"""

from __future__ import annotations

import threading
import time
from collections import namedtuple
from typing import TYPE_CHECKING

from daccore.errors import InternalError, StoreUnavailable

if TYPE_CHECKING:
    from typing import Callable, Iterator, Protocol, TypeVar

    from daccore.etcd_auth import Credential
    from daccore.etcd_stream import Watch
    T = TypeVar("T")

__all__ = ["EtcdClient", "KV", "Event", "TxnResult", "Compare", "Op", "WatchCompacted",
           "EtcdRequestError", "Unreachable", "absent", "mod_is", "put_op", "delete_op",
           "range_op", "TRANSPORTS"]

TRANSPORTS = ("grpc", "http")


class EtcdRequestError(InternalError):
    """etcd answered, and refused the request."""

    def __init__(self, what: str, code: int | None, message: str):
        super().__init__(f"etcd refused {what}: {message} (code {code})")
        self.code, self.reason = code, message


class Unreachable(Exception):
    """A transport could not get an answer from its endpoint; the client tries the next one."""


class WatchCompacted(InternalError):
    """The watch's start revision is older than etcd's compaction: re-list, then watch anew."""

    retryable = True

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
Op = namedtuple("Op", "kind key range_end value lease keys_only count_only revision "
                "min_mod_revision", defaults=(None, b"", 0, False, False, 0, 0))
#: ranges: the kvs of each range op of the branch that ran; counts: their counts, in order.
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


def range_op(key: str, range_end: str | None = None, keys_only: bool = False,
             count_only: bool = False, revision: int = 0, min_mod_revision: int = 0) -> Op:
    return Op("range", key, range_end, keys_only=keys_only, count_only=count_only,
              revision=revision, min_mod_revision=min_mod_revision)


class WatchMessage:
    """One response on a watch stream, whatever the transport."""

    __slots__ = ("revision", "events", "created", "compact_revision", "canceled", "reason")

    def __init__(self, revision: int, events: list, created: bool = False,
                 compact_revision: int = 0, canceled: bool = False, reason: str = ""):
        self.revision, self.events, self.created = revision, events, created
        self.compact_revision, self.canceled, self.reason = compact_revision, canceled, reason


if TYPE_CHECKING:
    class WatchStream(Protocol):
        def __iter__(self) -> Iterator[WatchMessage]: ...
        def close(self) -> None: ...

    class Transport(Protocol):
        """One endpoint. Methods raise Unreachable or EtcdRequestError, nothing else."""

        endpoint: str

        def range(self, key: str, range_end: str | None, keys_only: bool,
                  revision: int) -> tuple[list[KV], int]: ...
        def put(self, key: str, value: bytes, lease: int) -> int: ...
        def delete(self, key: str, range_end: str | None) -> int: ...
        def txn(self, compare: list[Compare], success: list[Op],
                failure: list[Op]) -> TxnResult: ...
        def compact(self, revision: int) -> None: ...
        def lease_grant(self, ttl: int) -> int: ...
        def lease_keepalive(self, lease: int) -> int: ...
        def lease_revoke(self, lease: int) -> None: ...
        def lease_time_to_live(self, lease: int) -> tuple[int, int]: ...
        def watch(self, key: str, range_end: str | None,
                  start_revision: int) -> WatchStream: ...
        def close(self) -> None: ...


class EtcdClient:
    """Thread-safe. Constructing one does no I/O and imports no transport yet."""

    def __init__(self, endpoints: list[str], *, cacert: str | None = None,
                 cert: str | None = None, key: str | None = None, timeout: float = 5.0,
                 transport: str = "grpc", credential: Credential | None = None):
        """`credential`: the etcd user to act as (daccore.etcd_auth); None on an etcd
        without RBAC."""
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown etcd transport '{transport}' (choose grpc or http)")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.transport = transport
        self._tls = (cacert, cert, key)
        self.credential = credential
        self._transports: list[Transport] | None = None
        self._lock = threading.Lock()
        self._preferred = 0

    def _all(self) -> list[Transport]:
        with self._lock:
            if self._transports is None:
                if self.transport == "grpc":
                    from daccore.etcd_grpc import GrpcTransport as cls
                else:
                    from daccore.etcd_http import HttpTransport as cls  # type: ignore[assignment]
                self._transports = [cls(e, *self._tls, timeout=self.timeout,
                                        credential=self.credential) for e in self.endpoints]
            return self._transports

    def _call(self, fn: Callable[[Transport], T]) -> T:
        """Run `fn` on the preferred endpoint, failing over and backing off until the deadline."""
        transports = self._all()
        start = time.monotonic()
        deadline = start + self.timeout
        delay, reason = 0.05, "no attempt made"
        while True:
            for j in range(len(transports)):
                i = (self._preferred + j) % len(transports)
                try:
                    result = fn(transports[i])
                except Unreachable as e:
                    reason = str(e)
                    continue
                self._preferred = i
                return result
            now = time.monotonic()
            if now >= deadline:
                raise StoreUnavailable(self.endpoints, reason, now - start)
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.5)

    def close(self) -> None:
        with self._lock:
            for t in self._transports or []:
                t.close()
            self._transports = None

    # -- KV ----------------------------------------------------------------------------------

    def range(self, key: str, range_end: str | None = None, *, keys_only: bool = False,
              revision: int = 0) -> tuple[list[KV], int]:
        """(kvs, revision of the read)."""
        return self._call(lambda t: t.range(key, range_end, keys_only, revision))

    def get(self, key: str) -> KV | None:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def put(self, key: str, value: str | bytes, lease: int = 0) -> int:
        data = value.encode() if isinstance(value, str) else value
        return self._call(lambda t: t.put(key, data, lease))

    def delete(self, key: str, range_end: str | None = None) -> int:
        return self._call(lambda t: t.delete(key, range_end))

    def txn(self, compare: list[Compare], success: list[Op],
            failure: list[Op] | None = None) -> TxnResult:
        # Retrying a txn whose reply was lost is safe here: every writing txn dac sends is
        # guarded by compares, so a repeat fails its compare instead of applying twice.
        return self._call(lambda t: t.txn(compare, success, failure or []))

    def compact(self, revision: int) -> None:
        self._call(lambda t: t.compact(revision))

    # -- leases ------------------------------------------------------------------------------

    def lease_grant(self, ttl: int) -> int:
        return self._call(lambda t: t.lease_grant(ttl))

    def lease_keepalive(self, lease: int) -> int:
        """Refresh; the TTL left, 0 when the lease has already expired."""
        return self._call(lambda t: t.lease_keepalive(lease))

    def lease_time_to_live(self, lease: int) -> tuple[int, int]:
        """(seconds left, seconds granted); seconds left is -1 once the lease has expired."""
        return self._call(lambda t: t.lease_time_to_live(lease))

    def lease_revoke(self, lease: int) -> None:
        try:
            self._call(lambda t: t.lease_revoke(lease))
        except EtcdRequestError as e:
            if e.code != 5:  # NOT_FOUND: expired already, which is what we wanted
                raise

    def watch(self, key: str, range_end: str | None = None, start_revision: int = 0) -> Watch:
        from daccore.etcd_stream import Watch
        return Watch(self, key, range_end, start_revision)


