"""The `http` transport: etcd's JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`,
`/v3/watch`) over the standard library, for processes that cannot afford to import gRPC.

It speaks the little HTTP/1.1 it needs over a socket itself (POST, keep-alive, Content-Length
or chunked replies): `http.client` imports the `email` package and cost 37 ms of the ~70 ms a
Slurm hook inside slurmctld may take (docs/performance.md). `ssl` is imported only for https.

With etcd's RBAC on, each request carries the token of the caller's role (`Authorization`
header; daccore.etcd.auth gets, caches and renews it).

Keys and values travel base64-encoded, 64-bit integers as strings, and a field at its default
value is left out of a response (a txn that failed has no "succeeded"). Verified against Debian's
etcd 3.4.23 by tests/store, which run every store test over both transports.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import threading
from urllib.parse import urlsplit

from daccore.errors import AdminError
from daccore.etcd.types import (
    KV,
    Compare,
    EtcdRequestError,
    Event,
    Op,
    TxnResult,
    Unreachable,
    WatchMessage,
    key_bytes,
    key_text,
)

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    import ssl
    from typing import Any, Iterator

    from daccore.etcd.auth import Credential

    #: a JSON object, as the gateway takes and answers it
    Json = dict[str, Any]

__all__ = ["HttpTransport"]

# gRPC status codes etcd uses when it cannot serve right now (no leader, overloaded).
_RETRY_CODES = {4, 8, 14}


def _b64(data: str | bytes) -> str:
    return base64.b64encode(key_bytes(data) if isinstance(data, str) else data).decode()


def _kv(d: Json) -> KV:
    value = d.get("value")
    return KV(
        key=key_text(binascii.a2b_base64(d["key"])),
        value=binascii.a2b_base64(value) if value else b"",
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


def _op(op: Op) -> Json:
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
    if op.min_mod_revision:
        body["min_mod_revision"] = str(op.min_mod_revision)
    return {"request_range": body}


def _compare(c: Compare) -> Json:
    field = "create_revision" if c.target == "CREATE" else "mod_revision"
    return {"key": _b64(c.key), "target": c.target, "result": "EQUAL", field: str(c.revision)}


def _describe(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if type(e).__name__.startswith("SSL"):
        return f"TLS error: {getattr(e, 'reason', None) or e}"
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).lower()


class _Connection:
    """One keep-alive HTTP/1.1 connection; raises OSError or ValueError on any fault."""

    def __init__(
        self,
        host: str,
        port: int,
        connect_timeout: float,
        timeout: float,
        context: ssl.SSLContext | None,
    ):
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
            sock.settimeout(timeout)
        except BaseException:
            sock.close()
            raise
        self.sock, self.host = sock, host
        self.rfile = sock.makefile("rb")

    def request(
        self, path: str, body: bytes, token: str | None = None
    ) -> tuple[int, dict[str, str]]:
        auth = f"Authorization: {token}\r\n" if token else ""
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\n{auth}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status = self.rfile.readline(65537).split(None, 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/"):
            raise ValueError(f"not an HTTP reply: {status!r}")
        headers: dict[str, str] = {}
        while True:
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n"):
                return int(status[1]), headers
            if not line:
                raise ConnectionResetError("connection closed in the reply's headers")
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()

    def body(self, headers: dict[str, str]) -> bytes:
        if "content-length" in headers:
            data = self.rfile.read(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            data = b"".join(self.chunks())
        else:
            raise ValueError("reply with neither Content-Length nor chunked encoding")
        if headers.get("connection", "").lower() == "close":
            self.close()
        return data

    def chunks(self) -> Iterator[bytes]:
        while True:
            size = int(self.rfile.readline(1026).split(b";")[0], 16)
            if size == 0:
                self.rfile.readline(1026)
                return
            data = self.rfile.read(size)
            if len(data) < size:
                raise ConnectionResetError("connection closed inside a chunk")
            self.rfile.readline(1026)
            yield data

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()


def _gateway_error(status: int, data: bytes) -> tuple[int | None, str]:
    try:
        err = json.loads(data)
        return err.get("code"), err.get("message") or err.get("error") or f"HTTP {status}"
    except ValueError:
        return None, f"HTTP {status}: {data[:200]!r}"


class HttpTransport:
    """One endpoint; each thread keeps its own keep-alive connection."""

    def __init__(
        self,
        endpoint: str,
        cacert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 5.0,
        credential: Credential | None = None,
    ):
        self.endpoint = endpoint
        self.timeout = timeout
        self.credential = credential
        self._url = urlsplit(endpoint)
        self._tls_files = (cacert, cert, key)
        self._ssl: ssl.SSLContext | None = None
        self._local = threading.local()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            import ssl

            cacert, cert, key = self._tls_files
            try:
                if cacert:  # what create_default_context does, in a third of its 2 ms
                    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                    ctx.load_verify_locations(cacert)
                else:
                    ctx = ssl.create_default_context()
                if cert:
                    ctx.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as e:
                raise AdminError(
                    f"cannot load etcd TLS files {cacert}, {cert}, {key}: {e} "
                    "(only the accounts dac runs as may read them: root, "
                    "SlurmUser; see docs/security.md)"
                ) from e
            self._ssl = ctx
        return self._ssl

    def connect(self, connect_timeout: float = 1.0) -> _Connection:
        context = self._ssl_context() if self._url.scheme == "https" else None
        try:
            return _Connection(
                self._url.hostname or "127.0.0.1",
                self._url.port or 2379,
                connect_timeout,
                self.timeout,
                context,
            )
        except (OSError, ValueError) as e:
            raise Unreachable(_describe(e)) from e

    def call(self, path: str, body: Json) -> Json:
        payload = json.dumps(body).encode()
        if self.credential is None:
            return self._post(path, payload, None)
        return self.credential.call(
            self.endpoint, self.authenticate, lambda token: self._post(path, payload, token)
        )

    def authenticate(self, user: str, password: str) -> str:
        body = json.dumps({"name": user, "password": password}).encode()
        token: str = self._post("/v3/auth/authenticate", body, None)["token"]
        return token

    def _post(self, path: str, payload: bytes, token: str | None) -> Json:
        conn = getattr(self._local, "conn", None)
        fresh = conn is None
        for _ in range(2):
            if conn is None:
                conn = self._local.conn = self.connect()
            try:
                status, headers = conn.request(path, payload, token)
                data = conn.body(headers)
                break
            except (OSError, ValueError) as e:
                self.close()
                conn = None
                if fresh:
                    raise Unreachable(_describe(e)) from e
                fresh = True  # a kept-alive connection the server had closed: one fresh try
        if status == 200:
            answer: Json = json.loads(data)
            return answer
        code, message = _gateway_error(status, data)
        if code in _RETRY_CODES or status in (502, 503, 504):
            raise Unreachable(message)
        raise EtcdRequestError(path, code, message)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def range(
        self, key: str, range_end: str | None, keys_only: bool, revision: int
    ) -> tuple[list[KV], int]:
        body = _op(Op("range", key, range_end, keys_only=keys_only))["request_range"]
        if revision:
            body["revision"] = str(revision)
        r = self.call("/v3/kv/range", body)
        return [_kv(d) for d in r.get("kvs", ())], int(r["header"]["revision"])

    def put(self, key: str, value: bytes, lease: int) -> int:
        r = self.call("/v3/kv/put", _op(Op("put", key, value=value, lease=lease))["request_put"])
        return int(r["header"]["revision"])

    def delete(self, key: str, range_end: str | None) -> int:
        r = self.call(
            "/v3/kv/deleterange", _op(Op("delete", key, range_end))["request_delete_range"]
        )
        return int(r.get("deleted", 0))

    def txn(self, compare: list[Compare], success: list[Op], failure: list[Op]) -> TxnResult:
        r = self.call(
            "/v3/kv/txn",
            {
                "compare": [_compare(c) for c in compare],
                "success": [_op(o) for o in success],
                "failure": [_op(o) for o in failure],
            },
        )
        found = [
            resp["response_range"] for resp in r.get("responses", ()) if "response_range" in resp
        ]
        return TxnResult(
            bool(r.get("succeeded", False)),
            int(r["header"]["revision"]),
            [[_kv(d) for d in f.get("kvs", ())] for f in found],
            [int(f.get("count", 0)) for f in found],
        )

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": str(revision)})

    def lease_grant(self, ttl: int) -> int:
        return int(self.call("/v3/lease/grant", {"TTL": str(ttl)})["ID"])

    def lease_keepalive(self, lease: int) -> int:
        r = self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(r.get("result", {}).get("TTL", 0))

    def lease_time_to_live(self, lease: int) -> tuple[int, int]:
        r = self.call("/v3/lease/timetolive", {"ID": str(lease)})
        return int(r.get("TTL", -1)), int(r.get("grantedTTL", 0))

    def lease_revoke(self, lease: int) -> None:
        self.call("/v3/lease/revoke", {"ID": str(lease)})

    def watch(self, key: str, range_end: str | None, start_revision: int) -> _HttpWatch:
        create: dict[str, Any] = {"key": _b64(key)}
        if range_end:
            create["range_end"] = _b64(range_end)
        if start_revision:
            create["start_revision"] = str(start_revision)
        request = json.dumps({"create_request": create}).encode()
        if self.credential is None:
            return _HttpWatch(self, request, None)
        return self.credential.call(
            self.endpoint, self.authenticate, lambda token: _HttpWatch(self, request, token)
        )


class _HttpWatch:
    """One streaming POST /v3/watch: chunked, newline-delimited JSON responses."""

    def __init__(self, transport: HttpTransport, request: bytes, token: str | None):
        self._transport, self._token = transport, token
        self._conn = transport.connect()
        self._sock = self._conn.sock
        self._closed = self._reading = False
        try:
            self._sock.settimeout(None)  # a quiet prefix is not an error; close() interrupts
            status, self._headers = self._conn.request("/v3/watch", request, token)
        except (OSError, ValueError) as e:
            self.close()
            raise Unreachable(_describe(e)) from e
        if status != 200:
            try:
                code, message = _gateway_error(status, self._conn.body(self._headers))
            except (OSError, ValueError):
                code, message = None, f"HTTP {status}"
            self.close()
            raise EtcdRequestError("/v3/watch", code, message)

    def __iter__(self) -> Iterator[WatchMessage]:
        self._reading = True
        try:
            yield from self._messages()
        finally:
            self._reading = False
            self._conn.close()

    def _lines(self) -> Iterator[bytes]:
        pending = b""
        try:
            for chunk in self._conn.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line for line in lines if line.strip())
        except (OSError, ValueError) as e:
            raise Unreachable(_describe(e)) from e
        raise Unreachable("watch stream ended")

    def _messages(self) -> Iterator[WatchMessage]:
        for line in self._lines():
            if self._closed:
                return
            msg = json.loads(line)
            if "error" in msg:
                err = msg["error"]
                raise EtcdRequestError("/v3/watch", err.get("http_code"), err.get("message", ""))
            r = msg.get("result", {})
            if r.get("canceled"):
                _renew_if_rejected(self._transport, self._token, r.get("cancel_reason", ""))
            yield WatchMessage(
                revision=int(r.get("header", {}).get("revision", 0)),
                events=[
                    Event("delete" if ev.get("type") == "DELETE" else "put", _kv(ev["kv"]))
                    for ev in r.get("events", ())
                ],
                created=bool(r.get("created")),
                compact_revision=int(r.get("compact_revision", 0)),
                canceled=bool(r.get("canceled")),
                reason=r.get("cancel_reason", ""),
            )

    def close(self) -> None:
        """Safe from another thread: shutting the socket down wakes the reader, which closes
        the connection itself."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if not self._reading:
            self._conn.close()


def _renew_if_rejected(transport: HttpTransport, token: str | None, reason: str) -> None:
    """A watch etcd cancels for its token (expired since the last request): renew it and
    break the stream, so the resuming Watch opens a new one with the fresh token."""
    from daccore.etcd.auth import token_rejected

    if transport.credential is not None and token and token_rejected(None, reason):
        transport.credential.renew(transport.endpoint, token, transport.authenticate)
        raise Unreachable("etcd token expired; renewed")
