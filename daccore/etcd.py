"""A small etcd v3 client over etcd's JSON gateway, standard library only.

Why not a client library: dacctl runs inside slurmctld's job_process/pools/paths hooks, whose
budget is a few `python3 -c pass` start-ups; aetcd costs 120-180 ms to import (gRPC, protobuf,
asyncio) and etcd3gw 170-270 ms (requests), measured in ../shared/notes/deps.md. The gateway
(`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`, `/v3/watch`) serves every RPC we use on
etcd 3.4 to 3.7. docs/architecture.md has the measurement.

Only `daccore.store` uses this module. Every failure to reach etcd within `timeout` seconds
becomes one `StoreUnavailable` naming the endpoints; etcd refusing a request becomes
`EtcdRequestError`.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

from daccore.errors import AdminError, InternalError, StoreUnavailable

log = logging.getLogger(__name__)

__all__ = ["EtcdClient", "KV", "Event", "TxnResult", "Watch", "WatchCompacted", "LeaseKeeper",
           "EtcdRequestError", "absent", "mod_is", "put_op", "delete_op", "range_op"]

# gRPC status codes etcd uses when it cannot serve right now (no leader, overloaded).
_RETRY_CODES = {4, 8, 14}


class EtcdRequestError(InternalError):
    """etcd answered, and refused the request."""

    def __init__(self, path: str, code: int | None, message: str):
        super().__init__(f"etcd refused {path}: {message} (code {code})")
        self.code = code


class WatchCompacted(InternalError):
    """The watch's start revision is older than etcd's compaction: re-list, then watch anew."""

    retryable = True

    def __init__(self, compact_revision: int):
        super().__init__(f"watch revision compacted; etcd keeps revisions from {compact_revision}")
        self.compact_revision = compact_revision


@dataclass(frozen=True, slots=True)
class KV:
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
class TxnResult:
    succeeded: bool
    revision: int
    responses: list[dict]

    def ranges(self) -> list[list[KV]]:
        """The kvs of each range op in the executed branch, in order."""
        return [[_kv(d) for d in r["response_range"].get("kvs", [])]
                for r in self.responses if "response_range" in r]


def _b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _kv(d: dict) -> KV:
    return KV(
        key=base64.b64decode(d["key"]).decode(),
        value=base64.b64decode(d.get("value", "")),
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


# Builders for txn compares and ops, in the gateway's JSON shape.

def absent(key: str) -> dict:
    """Compare: the key does not exist (create_revision == 0)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def mod_is(key: str, revision: int) -> dict:
    """Compare: the key was last changed at `revision` (compare-and-swap)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def put_op(key: str, value: str | bytes, lease: int = 0) -> dict:
    op: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        op["lease"] = str(lease)
    return {"request_put": op}


def delete_op(key: str, range_end: str | None = None) -> dict:
    op = {"key": _b64(key)}
    if range_end:
        op["range_end"] = _b64(range_end)
    return {"request_delete_range": op}


def range_op(key: str, range_end: str | None = None, keys_only: bool = False) -> dict:
    op: dict[str, Any] = {"key": _b64(key)}
    if range_end:
        op["range_end"] = _b64(range_end)
    if keys_only:
        op["keys_only"] = True
    return {"request_range": op}


class EtcdClient:
    """Thread-safe: each thread keeps its own HTTP connection per endpoint.

    Constructing one does no I/O. A request that cannot reach any endpoint is retried with
    backoff for at most `timeout` seconds, then raises StoreUnavailable.
    """

    def __init__(self, endpoints: list[str], *, cacert: str | None = None,
                 cert: str | None = None, key: str | None = None, timeout: float = 5.0):
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._urls = [urlsplit(e) for e in self.endpoints]
        self._tls_files = (cacert, cert, key)
        self._ssl: ssl.SSLContext | None = None
        self._local = threading.local()
        self._preferred = 0

    # -- transport ---------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            cacert, cert, key = self._tls_files
            try:
                ctx = ssl.create_default_context(cafile=cacert)
                if cert:
                    ctx.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as e:
                raise AdminError(f"cannot load etcd TLS files {cacert}, {cert}, {key}: {e}") from e
            self._ssl = ctx
        return self._ssl

    def _connect(self, i: int, connect_timeout: float) -> http.client.HTTPConnection:
        url = self._urls[i]
        host, port = url.hostname or "127.0.0.1", url.port
        if url.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port or 2379, timeout=connect_timeout, context=self._ssl_context())
        else:
            conn = http.client.HTTPConnection(host, port or 2379, timeout=connect_timeout)
        conn.connect()
        conn.sock.settimeout(self.timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _pooled(self, i: int, deadline: float) -> http.client.HTTPConnection:
        pool = self._local.__dict__.setdefault("conns", {})
        conn = pool.get(i)
        if conn is None:
            conn = self._connect(i, max(0.05, min(1.0, deadline - time.monotonic())))
            pool[i] = conn
        return conn

    def _drop(self, i: int) -> None:
        conn = self._local.__dict__.get("conns", {}).pop(i, None)
        if conn is not None:
            conn.close()

    def call(self, path: str, body: dict) -> dict:
        """POST one gateway request; retry unreachable endpoints until the deadline."""
        payload = json.dumps(body).encode()
        start = time.monotonic()
        deadline = start + self.timeout
        delay, reason = 0.05, "no attempt made"
        n = len(self._urls)
        while True:
            for j in range(n):
                i = (self._preferred + j) % n
                try:
                    conn = self._pooled(i, deadline)
                    conn.request("POST", path, body=payload,
                                 headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                except (OSError, http.client.HTTPException) as e:
                    self._drop(i)
                    reason = _describe(e)
                    continue
                if resp.status == 200:
                    self._preferred = i
                    return json.loads(data)
                code, message = _gateway_error(resp.status, data)
                if code in _RETRY_CODES or resp.status in (502, 503, 504):
                    reason = message
                    continue
                raise EtcdRequestError(path, code, message)
            now = time.monotonic()
            if now >= deadline:
                raise StoreUnavailable(self.endpoints, reason, now - start)
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.5)

    def close(self) -> None:
        """Close this thread's connections."""
        for i in list(self._local.__dict__.get("conns", {})):
            self._drop(i)

    # -- KV ----------------------------------------------------------------------------------

    def range(self, key: str, range_end: str | None = None, *, keys_only: bool = False,
              revision: int = 0) -> tuple[list[KV], int]:
        """(kvs, revision of the read)."""
        body = range_op(key, range_end, keys_only)["request_range"]
        if revision:
            body["revision"] = str(revision)
        r = self.call("/v3/kv/range", body)
        return [_kv(d) for d in r.get("kvs", [])], int(r["header"]["revision"])

    def get(self, key: str) -> KV | None:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def put(self, key: str, value: str | bytes, lease: int = 0) -> int:
        r = self.call("/v3/kv/put", put_op(key, value, lease)["request_put"])
        return int(r["header"]["revision"])

    def delete(self, key: str, range_end: str | None = None) -> int:
        r = self.call("/v3/kv/deleterange", delete_op(key, range_end)["request_delete_range"])
        return int(r.get("deleted", 0))

    def txn(self, compare: list[dict], success: list[dict],
            failure: list[dict] | None = None) -> TxnResult:
        r = self.call("/v3/kv/txn", {"compare": compare, "success": success,
                                     "failure": failure or []})
        return TxnResult(bool(r.get("succeeded", False)), int(r["header"]["revision"]),
                         r.get("responses", []))

    # -- leases ------------------------------------------------------------------------------

    def lease_grant(self, ttl: int) -> int:
        return int(self.call("/v3/lease/grant", {"TTL": str(ttl)})["ID"])

    def lease_keepalive(self, lease: int) -> int:
        """Refresh; the TTL left, 0 when the lease has already expired."""
        r = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(r.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease: int) -> None:
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdRequestError as e:
            if e.code != 5:  # NOT_FOUND: expired already, which is what we wanted
                raise

    def watch(self, key: str, range_end: str | None = None, start_revision: int = 0) -> Watch:
        return Watch(self, key, range_end, start_revision)


def _describe(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, ssl.SSLError):
        return f"TLS error: {e.reason or e}"
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).lower()


def _gateway_error(status: int, data: bytes) -> tuple[int | None, str]:
    try:
        err = json.loads(data)
        return err.get("code"), err.get("message") or err.get("error") or f"HTTP {status}"
    except ValueError:
        return None, f"HTTP {status}: {data[:200]!r}"


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
        self._sock: socket.socket | None = None
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        self._closed = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __iter__(self) -> Iterator[Event]:
        failing_since: float | None = None
        delay = 0.05
        while not self._closed:
            try:
                resp = self._open()
                failing_since, delay = None, 0.05
                yield from self._read(resp)
            except (OSError, http.client.HTTPException, ValueError) as e:
                if self._closed:
                    return
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self._client.timeout:
                    raise StoreUnavailable(self._client.endpoints, _describe(e),
                                           now - failing_since) from e
                log.debug("watch on %s broke (%s); resuming from revision %s",
                          self._key, _describe(e), self.next_revision)
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            finally:
                if self._conn is not None:
                    self._conn.close()
                self._conn = self._sock = None

    def _open(self) -> http.client.HTTPResponse:
        client = self._client
        create: dict[str, Any] = {"key": _b64(self._key)}
        if self._range_end:
            create["range_end"] = _b64(self._range_end)
        if self.next_revision:
            create["start_revision"] = str(self.next_revision)
        i = client._preferred
        self._conn = conn = client._connect(i, 1.0)
        self._sock = conn.sock
        if self._closed:
            raise OSError("watch closed")
        conn.sock.settimeout(None)  # a quiet prefix is not an error; close() interrupts
        conn.request("POST", "/v3/watch", body=json.dumps({"create_request": create}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            code, message = _gateway_error(resp.status, resp.read())
            raise EtcdRequestError("/v3/watch", code, message)
        return resp

    def _read(self, resp: http.client.HTTPResponse) -> Iterator[Event]:
        while not self._closed:
            line = resp.readline()
            if not line:
                raise http.client.IncompleteRead(b"", None)  # stream ended: reconnect
            msg = json.loads(line)
            if "error" in msg:
                err = msg["error"]
                raise EtcdRequestError("/v3/watch", err.get("http_code"), err.get("message", ""))
            result = msg.get("result", {})
            if result.get("compact_revision"):
                raise WatchCompacted(int(result["compact_revision"]))
            if result.get("canceled"):
                raise EtcdRequestError("/v3/watch", None, result.get("cancel_reason", "canceled"))
            if result.get("created") and not self.next_revision:
                self.next_revision = int(result["header"]["revision"]) + 1
            events = result.get("events", [])
            for ev in events:
                yield Event("delete" if ev.get("type") == "DELETE" else "put", _kv(ev["kv"]))
            if events:
                # etcd sends a revision's events together, so resuming after it loses nothing.
                self.next_revision = max(_kv(ev["kv"]).mod_revision for ev in events) + 1


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
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, wait: float | None = None) -> LeaseKeeper:
        """Start, and with `wait` block until the first lease is bound (raising if it isn't)."""
        if wait is None:
            self._thread.start()
            return self
        self._establish()  # errors reach the caller: a daemon should not start without etcd
        self._ready.set()
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
                    self._ready.set()
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
