"""The long-lived parts of the etcd client, used by daemons: a resumable watch and a lease
kept alive in a thread. Split from `daccore.etcd.client` so that the short-lived Slurm hooks never
import `logging` for them."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator

from daccore.errors import StoreUnavailable
from daccore.etcd.types import EtcdRequestError, Event, Unreachable, WatchCompacted, WatchMessage

if TYPE_CHECKING:
    from daccore.etcd.client import EtcdClient
    from daccore.etcd.types import EtcdApi, WatchStream

log = logging.getLogger(__name__)

__all__ = ["Watch", "LeaseKeeper"]


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
                    raise StoreUnavailable(
                        self._client.endpoints, str(e), now - failing_since
                    ) from e
                self._client._preferred += 1  # try the next endpoint, if there is one
                log.debug(
                    "watch on %s broke (%s); resuming from revision %s",
                    self._key,
                    e,
                    self.next_revision,
                )
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

    def __init__(self, client: EtcdApi, ttl: int, bind: Callable[[int], None], name: str = "lease"):
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
                log.warning(
                    "could not revoke lease %x (it expires in %ss): %s", self.lease, self.ttl, e
                )
            self.lease = 0
