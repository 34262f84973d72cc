"""The `http` transport: etcd's JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`,
`/v3/watch`) over the standard library, for processes that cannot afford to import gRPC.

Keys and values travel base64-encoded, 64-bit integers as strings, and a field at its default
value is left out of a response (a txn that failed has no "succeeded"). Verified against Debian's
etcd 3.4.23 by tests/store, which run every store test over both transports.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import ssl
import threading
from typing import Any, Iterator
from urllib.parse import urlsplit

from daccore.errors import AdminError
from daccore.etcd import (KV, Compare, EtcdRequestError, Event, Op, TxnResult, Unreachable,
                          WatchMessage)

__all__ = ["HttpTransport"]

# gRPC status codes etcd uses when it cannot serve right now (no leader, overloaded).
_RETRY_CODES = {4, 8, 14}


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _kv(d: dict) -> KV:
    value = d.get("value")
    return KV(
        key=binascii.a2b_base64(d["key"]).decode(),
        value=binascii.a2b_base64(value) if value else b"",
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


def _op(op: Op) -> dict:
    body: dict[str, Any] = {"key": _b64(op.key)}
    if op.range_end:
        body["range_end"] = _b64(op.range_end)
    if op.kind == "put":
        body["value"] = _b64(op.value)
        if op.lease:
            body["lease"] = str(op.lease)
        return {"request_put": body}
    if op.kind == "delete":
        return {"request_delete_range": body}
    if op.keys_only:
        body["keys_only"] = True
    if op.count_only:
        body["count_only"] = True
    if op.revision:
        body["revision"] = str(op.revision)
    return {"request_range": body}


def _compare(c: Compare) -> dict:
    field = "create_revision" if c.target == "CREATE" else "mod_revision"
    return {"key": _b64(c.key), "target": c.target, "result": "EQUAL", field: str(c.revision)}


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


class HttpTransport:
    """One endpoint; each thread keeps its own keep-alive connection."""

    def __init__(self, endpoint: str, cacert: str | None = None, cert: str | None = None,
                 key: str | None = None, *, timeout: float = 5.0):
        self.endpoint = endpoint
        self.timeout = timeout
        self._url = urlsplit(endpoint)
        self._tls_files = (cacert, cert, key)
        self._ssl: ssl.SSLContext | None = None
        self._local = threading.local()

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

    def connect(self, connect_timeout: float = 1.0) -> http.client.HTTPConnection:
        host, port = self._url.hostname or "127.0.0.1", self._url.port or 2379
        if self._url.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=connect_timeout, context=self._ssl_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=connect_timeout)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unreachable(_describe(e)) from e
        conn.sock.settimeout(self.timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def call(self, path: str, body: dict) -> dict:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Unreachable(_describe(e)) from e
        if resp.status == 200:
            return json.loads(data)
        code, message = _gateway_error(resp.status, data)
        if code in _RETRY_CODES or resp.status in (502, 503, 504):
            raise Unreachable(message)
        raise EtcdRequestError(path, code, message)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def range(self, key: str, range_end: str | None, keys_only: bool,
              revision: int) -> tuple[list[KV], int]:
        body = _op(Op("range", key, range_end, keys_only=keys_only))["request_range"]
        if revision:
            body["revision"] = str(revision)
        r = self.call("/v3/kv/range", body)
        return [_kv(d) for d in r.get("kvs", ())], int(r["header"]["revision"])

    def put(self, key: str, value: bytes, lease: int) -> int:
        r = self.call("/v3/kv/put", _op(Op("put", key, value=value, lease=lease))["request_put"])
        return int(r["header"]["revision"])

    def delete(self, key: str, range_end: str | None) -> int:
        r = self.call("/v3/kv/deleterange", _op(Op("delete", key, range_end))
                      ["request_delete_range"])
        return int(r.get("deleted", 0))

    def txn(self, compare: list[Compare], success: list[Op], failure: list[Op]) -> TxnResult:
        r = self.call("/v3/kv/txn", {"compare": [_compare(c) for c in compare],
                                     "success": [_op(o) for o in success],
                                     "failure": [_op(o) for o in failure]})
        found = [resp["response_range"] for resp in r.get("responses", ())
                 if "response_range" in resp]
        return TxnResult(bool(r.get("succeeded", False)), int(r["header"]["revision"]),
                         [[_kv(d) for d in f.get("kvs", ())] for f in found],
                         [int(f.get("count", 0)) for f in found])

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": str(revision)})

    def lease_grant(self, ttl: int) -> int:
        return int(self.call("/v3/lease/grant", {"TTL": str(ttl)})["ID"])

    def lease_keepalive(self, lease: int) -> int:
        r = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(r.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease: int) -> None:
        self.call("/v3/lease/revoke", {"ID": str(lease)})

    def watch(self, key: str, range_end: str | None, start_revision: int) -> _HttpWatch:
        create: dict[str, Any] = {"key": _b64(key)}
        if range_end:
            create["range_end"] = _b64(range_end)
        if start_revision:
            create["start_revision"] = str(start_revision)
        return _HttpWatch(self, {"create_request": create})


class _HttpWatch:
    """One streaming POST /v3/watch; newline-delimited JSON responses."""

    def __init__(self, transport: HttpTransport, request: dict):
        self._conn = transport.connect()
        self._sock = self._conn.sock
        self._closed = self._reading = False
        try:
            self._sock.settimeout(None)  # a quiet prefix is not an error; close() interrupts
            self._conn.request("POST", "/v3/watch", body=json.dumps(request),
                               headers={"Content-Type": "application/json"})
            self._resp = self._conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Unreachable(_describe(e)) from e
        if self._resp.status != 200:
            code, message = _gateway_error(self._resp.status, self._resp.read())
            self.close()
            raise EtcdRequestError("/v3/watch", code, message)

    def __iter__(self) -> Iterator[WatchMessage]:
        self._reading = True
        try:
            yield from self._messages()
        finally:
            self._reading = False
            self._conn.close()

    def _messages(self) -> Iterator[WatchMessage]:
        while not self._closed:
            try:
                line = self._resp.readline()
            except (OSError, http.client.HTTPException, ValueError) as e:
                raise Unreachable(_describe(e)) from e
            if not line:
                raise Unreachable("watch stream ended")
            msg = json.loads(line)
            if "error" in msg:
                err = msg["error"]
                raise EtcdRequestError("/v3/watch", err.get("http_code"), err.get("message", ""))
            r = msg.get("result", {})
            yield WatchMessage(
                revision=int(r.get("header", {}).get("revision", 0)),
                events=[Event("delete" if ev.get("type") == "DELETE" else "put", _kv(ev["kv"]))
                        for ev in r.get("events", ())],
                created=bool(r.get("created")),
                compact_revision=int(r.get("compact_revision", 0)),
                canceled=bool(r.get("canceled")),
                reason=r.get("cancel_reason", ""))

    def close(self) -> None:
        """Safe from another thread: shutting the socket down wakes the reader, which closes
        the connection itself (http.client objects must not be closed under a reader)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if not self._reading:
            self._conn.close()
