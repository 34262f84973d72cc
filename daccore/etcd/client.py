"""dac's etcd client: one API over two transports, with bounded retry and endpoint failover.

Two transports, because the two kinds of caller pull in opposite directions (measured,
docs/performance.md):

- `grpc` (default; `daccore.etcd.grpc_transport`): etcd's native protocol, through the
  generated stubs that aetcd ships. At 1,000 hosts x 24 bricks it reads the whole inventory
  in ~40 ms, where the JSON gateway spends ~250 ms marshalling one JSON object per key.
  Importing grpc costs ~150 ms, which a daemon or an admin command pays once.
- `http` (`daccore.etcd.http_transport`): etcd's JSON gateway over the standard library.
  Nothing to import: what the hooks that run inside slurmctld (job_process, pools, paths) use.

Only `daccore.store` uses this module; the records and errors are in `daccore.etcd.types`.
A request that cannot reach any endpoint is retried with backoff for at most `timeout`
seconds, then raises one `StoreUnavailable` naming the endpoints; etcd refusing a request
raises `EtcdRequestError`.
"""

from __future__ import annotations

import threading
import time

from daccore.errors import StoreUnavailable
from daccore.etcd.types import KV, TRANSPORTS, EtcdRequestError, TxnResult, Unreachable

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Callable, TypeVar

    from daccore.etcd.auth import Credential
    from daccore.etcd.stream import Watch
    from daccore.etcd.types import Compare, Op, Transport

    T = TypeVar("T")

__all__ = ["EtcdClient"]


class EtcdClient:
    """Thread-safe. Constructing one does no I/O and imports no transport yet."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        cacert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        timeout: float = 5.0,
        transport: str = "grpc",
        credential: Credential | None = None,
    ):
        """`credential`: the etcd user to act as (daccore.etcd.auth); None on an etcd
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
                    from daccore.etcd.grpc_transport import GrpcTransport as cls
                else:
                    from daccore.etcd.http_transport import HttpTransport as cls  # type: ignore[assignment]
                self._transports = [
                    cls(e, *self._tls, timeout=self.timeout, credential=self.credential)
                    for e in self.endpoints
                ]
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

    def range(
        self, key: str, range_end: str | None = None, *, keys_only: bool = False, revision: int = 0
    ) -> tuple[list[KV], int]:
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

    def txn(
        self, compare: list[Compare], success: list[Op], failure: list[Op] | None = None
    ) -> TxnResult:
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
        from daccore.etcd.stream import Watch

        return Watch(self, key, range_end, start_revision)
