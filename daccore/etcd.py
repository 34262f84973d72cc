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

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple, Protocol, TypeVar

from daccore.errors import InternalError, StoreUnavailable

log = logging.getLogger(__name__)

__all__ = ["EtcdClient", "KV", "Event", "TxnResult", "Compare", "Op", "Watch", "WatchCompacted",
           "LeaseKeeper", "EtcdRequestError", "Unreachable", "absent", "mod_is", "put_op",
           "delete_op", "range_op", "TRANSPORTS"]

TRANSPORTS = ("grpc", "http")
T = TypeVar("T")


class EtcdRequestError(InternalError):
    """etcd answered, and refused the request."""

    def __init__(self, what: str, code: int | None, message: str):
        super().__init__(f"etcd refused {what}: {message} (code {code})")
        self.code = code


class Unreachable(Exception):
    """A transport could not get an answer from its endpoint; the client tries the next one."""


class WatchCompacted(InternalError):
    """The watch's start revision is older than etcd's compaction: re-list, then watch anew."""

    retryable = True

    def __init__(self, compact_revision: int):
        super().__init__(f"watch revision compacted; etcd keeps revisions from {compact_revision}")
        self.compact_revision = compact_revision


class KV(NamedTuple):
    """A NamedTuple, not a dataclass: inventories build thousands per read, and a frozen
    dataclass costs about three times as much to construct."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int = 0
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # "put" or "delete"
    kv: KV


@dataclass(frozen=True, slots=True)
class Compare:
    """`target` is CREATE (create_revision) or MOD (mod_revision); the test is equality."""

    key: str
    target: str
    revision: int


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # "put", "delete" or "range"
    key: str
    range_end: str | None = None
    value: bytes = b""
    lease: int = 0
    keys_only: bool = False
    count_only: bool = False
    revision: int = 0  # a range as of this revision (0: the latest)


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    #: the kvs of each range op of the branch that ran, in order
    ranges: list[list[KV]] = field(default_factory=list)
    #: the count of each range op, in the same order (what count_only ranges return)
    counts: list[int] = field(default_factory=list)


def absent(key: str) -> Compare:
    """The key does not exist (create_revision == 0)."""
    return Compare(key, "CREATE", 0)


def mod_is(key: str, revision: int) -> Compare:
    """The key was last changed at `revision` (compare-and-swap)."""
    return Compare(key, "MOD", revision)


def put_op(key: str, value: str | bytes, lease: int = 0) -> Op:
    return Op("put", key, value=value.encode() if isinstance(value, str) else value, lease=lease)


def delete_op(key: str, range_end: str | None = None) -> Op:
    return Op("delete", key, range_end)


def range_op(key: str, range_end: str | None = None, keys_only: bool = False,
             count_only: bool = False, revision: int = 0) -> Op:
    return Op("range", key, range_end, keys_only=keys_only, count_only=count_only,
              revision=revision)


@dataclass(slots=True)
class WatchMessage:
    """One response on a watch stream, whatever the transport."""

    revision: int
    events: list[Event]
    created: bool = False
    compact_revision: int = 0
    canceled: bool = False
    reason: str = ""


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
    def txn(self, compare: list[Compare], success: list[Op], failure: list[Op]) -> TxnResult: ...
    def compact(self, revision: int) -> None: ...
    def lease_grant(self, ttl: int) -> int: ...
    def lease_keepalive(self, lease: int) -> int: ...
    def lease_revoke(self, lease: int) -> None: ...
    def watch(self, key: str, range_end: str | None, start_revision: int) -> WatchStream: ...
    def close(self) -> None: ...


class EtcdClient:
    """Thread-safe. Constructing one does no I/O and imports no transport yet."""

    def __init__(self, endpoints: list[str], *, cacert: str | None = None,
                 cert: str | None = None, key: str | None = None, timeout: float = 5.0,
                 transport: str = "grpc"):
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown etcd transport '{transport}' (choose grpc or http)")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.transport = transport
        self._tls = (cacert, cert, key)
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
                self._transports = [cls(e, *self._tls, timeout=self.timeout)
                                    for e in self.endpoints]
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

    def lease_revoke(self, lease: int) -> None:
        try:
            self._call(lambda t: t.lease_revoke(lease))
        except EtcdRequestError as e:
            if e.code != 5:  # NOT_FOUND: expired already, which is what we wanted
                raise

    def watch(self, key: str, range_end: str | None = None, start_revision: int = 0) -> Watch:
        return Watch(self, key, range_end, start_revision)


class Watch:
    """Events under [key, range_end) from `start_revision` on (0: from now).

    Iterating reconnects after a broken stream and resumes after the last revision it
    delivered, so no event is lost or repeated. Raises WatchCompacted when etcd no longer has
    that revision, and StoreUnavailable when etcd stays unreachable for the client's timeout.
    `close()` from another thread ends the iteration.
    """

    def __init__(self, client: EtcdClient, key: str, range_end: str | None, start_revision: int):
        self._client = client
        self._key, self._range_end = key, range_end
        self.next_revision = start_revision
        self._closed = False
        self._stream: WatchStream | None = None

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.close()

    def interrupt(self) -> None:
        """Break the current stream as a network fault would (for tests); iteration resumes."""
        if self._stream is not None:
            self._stream.close()

    def __iter__(self) -> Iterator[Event]:
        failing_since: float | None = None
        delay = 0.05
        while not self._closed:
            transports = self._client._all()
            transport = transports[self._client._preferred % len(transports)]
            try:
                self._stream = transport.watch(self._key, self._range_end, self.next_revision)
                if self._closed:
                    return
                for msg in self._stream:
                    failing_since, delay = None, 0.05
                    yield from self._deliver(msg)
                    if self._closed:
                        return
                raise Unreachable("watch stream ended")
            except Unreachable as e:
                if self._closed:
                    return
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self._client.timeout:
                    raise StoreUnavailable(self._client.endpoints, str(e), now - failing_since)
                self._client._preferred += 1  # try the next endpoint, if there is one
                log.debug("watch on %s broke (%s); resuming from revision %s", self._key, e,
                          self.next_revision)
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            finally:
                if self._stream is not None:
                    self._stream.close()
                self._stream = None

    def _deliver(self, msg: WatchMessage) -> Iterator[Event]:
        if msg.compact_revision:
            raise WatchCompacted(msg.compact_revision)
        if msg.canceled:
            raise EtcdRequestError("watch", None, msg.reason or "canceled")
        if msg.created and not self.next_revision:
            self.next_revision = msg.revision + 1
        yield from msg.events
        if msg.events:
            # etcd sends a revision's events together, so resuming after it loses nothing.
            self.next_revision = max(e.kv.mod_revision for e in msg.events) + 1


class LeaseKeeper:
    """Keeps one lease alive in a thread; grants a new one when it is lost.

    `bind(lease_id)` is called with every newly granted lease to (re)attach keys to it, so an
    etcd outage longer than the TTL heals itself once etcd is back. `stop()` revokes the lease,
    which deletes the bound keys at once instead of after the TTL.
    """

    def __init__(self, client: EtcdClient, ttl: int, bind: Callable[[int], None],
                 name: str = "lease"):
        self._client, self.ttl, self._bind = client, ttl, bind
        self.lease = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, establish: bool = True) -> LeaseKeeper:
        """Start; with `establish`, first bind a lease here so errors reach the caller (a
        daemon should not report itself started without etcd)."""
        if establish:
            self._establish()
        self._thread.start()
        return self

    def _establish(self) -> None:
        lease = self._client.lease_grant(self.ttl)
        self._bind(lease)
        self.lease = lease

    def _run(self) -> None:
        interval = max(self.ttl / 3, 0.5)
        while not self._stop.is_set():
            try:
                if not self.lease:
                    self._establish()
                    log.info("lease %x granted (ttl %ss)", self.lease, self.ttl)
                elif self._client.lease_keepalive(self.lease) == 0:
                    log.warning("lease %x expired; granting a new one", self.lease)
                    self.lease = 0
                    continue
            except StoreUnavailable as e:
                log.warning("cannot refresh lease: %s", e)
            except EtcdRequestError as e:
                log.warning("lease refresh refused: %s", e)
                self.lease = 0
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._client.timeout + 1)
        if self.lease:
            try:
                self._client.lease_revoke(self.lease)
            except (StoreUnavailable, EtcdRequestError) as e:
                log.warning("could not revoke lease %x (it expires in %ss): %s",
                            self.lease, self.ttl, e)
            self.lease = 0
