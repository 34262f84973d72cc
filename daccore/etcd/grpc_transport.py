"""The `grpc` transport: etcd's native gRPC API, synchronous, through the protobuf stubs that
aetcd generates and ships (`aetcd.rpc`); aetcd's own client is asyncio-only, and dacd is built
on threads. Every gRPC error is translated here, and nowhere else. With etcd's RBAC on, each call
carries the role's token as `token` metadata (daccore.etcd.auth gets and renews it).
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Iterator
from urllib.parse import urlsplit

import grpc
from aetcd.rpc import kv_pb2, rpc_pb2, rpc_pb2_grpc

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

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from daccore.etcd.auth import Credential

    T = TypeVar("T")
    #: a call's gRPC metadata: the role's token, when there is a credential
    Metadata = tuple[tuple[str, str], ...]

# aetcd's generated messages carry no types (they are Any to mypy): the fields dac reads from an
# answer are put in typed names before they leave this module.

__all__ = ["GrpcTransport"]

_RETRY = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_TARGET = {"CREATE": rpc_pb2.Compare.CREATE, "MOD": rpc_pb2.Compare.MOD}


def _kv(kv: kv_pb2.KeyValue) -> KV:
    return KV(key_text(kv.key), kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


def _compare(c: Compare) -> rpc_pb2.Compare:
    pb = rpc_pb2.Compare(
        key=key_bytes(c.key), target=_TARGET[c.target], result=rpc_pb2.Compare.EQUAL
    )
    if c.target == "CREATE":
        pb.create_revision = c.revision
    else:
        pb.mod_revision = c.revision
    return pb


def _op(op: Op) -> rpc_pb2.RequestOp:
    end = key_bytes(op.range_end) if op.range_end else b""
    if op.kind == "put":
        return rpc_pb2.RequestOp(
            request_put=rpc_pb2.PutRequest(key=key_bytes(op.key), value=op.value, lease=op.lease)
        )
    if op.kind == "delete":
        return rpc_pb2.RequestOp(
            request_delete_range=rpc_pb2.DeleteRangeRequest(key=key_bytes(op.key), range_end=end)
        )
    return rpc_pb2.RequestOp(
        request_range=rpc_pb2.RangeRequest(
            key=key_bytes(op.key),
            range_end=end,
            keys_only=op.keys_only,
            count_only=op.count_only,
            revision=op.revision,
            min_mod_revision=op.min_mod_revision,
        )
    )


def _translate(e: grpc.RpcError, what: str) -> Exception:
    code = e.code()
    if code in _RETRY:
        details = (e.details() or code.name).lower()
        # grpc's "failed to connect to all addresses; last error: ...: connection refused"
        for short in ("connection refused", "deadline exceeded", "ssl", "handshake"):
            if short in details:
                details = {"ssl": "TLS handshake failed", "handshake": "TLS handshake failed"}.get(
                    short, short
                )
                break
        return Unreachable(details)
    return EtcdRequestError(what, code.value[0], e.details() or code.name)


class GrpcTransport:
    """One endpoint, one channel (gRPC channels are thread-safe and reconnect by themselves)."""

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
        url = urlsplit(endpoint)
        target = f"{url.hostname or '127.0.0.1'}:{url.port or 2379}"
        # Large inventories: 1,000 hosts x 24 bricks is ~3 MB in one range.
        options = [("grpc.max_receive_message_length", 256 << 20)]
        if url.scheme == "https":
            self._channel = grpc.secure_channel(target, _credentials(cacert, cert, key), options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self._kv = rpc_pb2_grpc.KVStub(self._channel)
        self._lease = rpc_pb2_grpc.LeaseStub(self._channel)
        self._watch = rpc_pb2_grpc.WatchStub(self._channel)
        self._auth = rpc_pb2_grpc.AuthStub(self._channel)

    def _authed(self, fn: Callable[[Metadata | None], T]) -> T:
        """`fn(metadata)`, with the role's token when there is a credential."""
        if self.credential is None:
            return fn(None)
        return self.credential.call(
            self.endpoint, self.authenticate, lambda token: fn((("token", token),))
        )

    def authenticate(self, user: str, password: str) -> str:
        try:
            token: str = self._auth.Authenticate(
                rpc_pb2.AuthenticateRequest(name=user, password=password), timeout=self.timeout
            ).token
        except grpc.RpcError as e:
            raise _translate(e, "authenticate") from e
        return token

    def _unary(self, method: Callable[..., Any], request: object, what: str) -> Any:
        def once(metadata: Metadata | None) -> Any:
            try:
                return method(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as e:
                raise _translate(e, what) from e

        return self._authed(once)

    def close(self) -> None:
        self._channel.close()

    def range(
        self, key: str, range_end: str | None, keys_only: bool, revision: int
    ) -> tuple[list[KV], int]:
        r = self._unary(
            self._kv.Range,
            rpc_pb2.RangeRequest(
                key=key_bytes(key),
                range_end=key_bytes(range_end) if range_end else b"",
                keys_only=keys_only,
                revision=revision,
            ),
            "range",
        )
        return [_kv(kv) for kv in r.kvs], r.header.revision

    def put(self, key: str, value: bytes, lease: int) -> int:
        r = self._unary(
            self._kv.Put, rpc_pb2.PutRequest(key=key_bytes(key), value=value, lease=lease), "put"
        )
        revision: int = r.header.revision
        return revision

    def delete(self, key: str, range_end: str | None) -> int:
        r = self._unary(
            self._kv.DeleteRange,
            rpc_pb2.DeleteRangeRequest(
                key=key_bytes(key), range_end=key_bytes(range_end) if range_end else b""
            ),
            "delete",
        )
        deleted: int = r.deleted
        return deleted

    def txn(self, compare: list[Compare], success: list[Op], failure: list[Op]) -> TxnResult:
        r = self._unary(
            self._kv.Txn,
            rpc_pb2.TxnRequest(
                compare=[_compare(c) for c in compare],
                success=[_op(o) for o in success],
                failure=[_op(o) for o in failure],
            ),
            "txn",
        )
        found = [
            resp.response_range
            for resp in r.responses
            if resp.WhichOneof("response") == "response_range"
        ]
        return TxnResult(
            r.succeeded,
            r.header.revision,
            [[_kv(kv) for kv in f.kvs] for f in found],
            [f.count for f in found],
        )

    def compact(self, revision: int) -> None:
        self._unary(self._kv.Compact, rpc_pb2.CompactionRequest(revision=revision), "compact")

    def lease_grant(self, ttl: int) -> int:
        r = self._unary(self._lease.LeaseGrant, rpc_pb2.LeaseGrantRequest(TTL=ttl), "lease grant")
        if r.error:
            raise EtcdRequestError("lease grant", None, r.error)
        lease: int = r.ID
        return lease

    def lease_keepalive(self, lease: int) -> int:
        def once(metadata: Metadata | None) -> int:
            try:
                for r in self._lease.LeaseKeepAlive(
                    iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease)]),
                    timeout=self.timeout,
                    metadata=metadata,
                ):
                    ttl: int = r.TTL
                    return ttl
            except grpc.RpcError as e:
                raise _translate(e, "lease keepalive") from e
            raise Unreachable("lease keepalive stream ended without an answer")

        return self._authed(once)

    def lease_time_to_live(self, lease: int) -> tuple[int, int]:
        r = self._unary(
            self._lease.LeaseTimeToLive,
            rpc_pb2.LeaseTimeToLiveRequest(ID=lease),
            "lease time-to-live",
        )
        return r.TTL, r.grantedTTL

    def lease_revoke(self, lease: int) -> None:
        self._unary(self._lease.LeaseRevoke, rpc_pb2.LeaseRevokeRequest(ID=lease), "lease revoke")

    def watch(self, key: str, range_end: str | None, start_revision: int) -> _GrpcWatch:
        create = rpc_pb2.WatchCreateRequest(
            key=key_bytes(key),
            start_revision=start_revision,
            range_end=key_bytes(range_end) if range_end else b"",
        )
        request = rpc_pb2.WatchRequest(create_request=create)
        return self._authed(lambda metadata: _GrpcWatch(self, request, metadata))


class _GrpcWatch:
    """One bidirectional Watch stream. The request side stays open until close(): etcd ends a
    watch whose client has half-closed the stream."""

    def __init__(
        self, transport: GrpcTransport, request: rpc_pb2.WatchRequest, metadata: Metadata | None
    ):
        self._transport, self._metadata = transport, metadata
        self._requests: queue.Queue[rpc_pb2.WatchRequest | None] = queue.Queue()
        self._requests.put(request)
        self._call = transport._watch.Watch(iter(self._requests.get, None), metadata=metadata)

    def __iter__(self) -> Iterator[WatchMessage]:
        try:
            for r in self._call:
                if r.canceled:
                    self._renew_if_rejected(r.cancel_reason)
                yield WatchMessage(
                    revision=r.header.revision,
                    events=[
                        Event("delete" if ev.type == kv_pb2.Event.DELETE else "put", _kv(ev.kv))
                        for ev in r.events
                    ],
                    created=r.created,
                    compact_revision=r.compact_revision,
                    canceled=r.canceled,
                    reason=r.cancel_reason,
                )
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                raise Unreachable("watch cancelled") from e
            if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                self._renew_if_rejected(e.details() or "invalid auth token")
            raise _translate(e, "watch") from e

    def _renew_if_rejected(self, reason: str) -> None:
        """A watch etcd cancels for its token: renew it and break the stream, so the resuming
        Watch opens a new one with the fresh token."""
        from daccore.etcd.auth import token_rejected

        t = self._transport
        if t.credential is not None and self._metadata and token_rejected(None, reason):
            t.credential.renew(t.endpoint, self._metadata[0][1], t.authenticate)
            raise Unreachable("etcd token expired; renewed")

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


def _credentials(cacert: str | None, cert: str | None, key: str | None) -> grpc.ChannelCredentials:
    def read(path: str | None) -> bytes | None:
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise AdminError(
                f"cannot read etcd TLS file {path}: {e.strerror} (only the "
                "accounts dac runs as may: root, SlurmUser; see "
                "docs/security.md)"
            ) from e

    return grpc.ssl_channel_credentials(read(cacert), read(key), read(cert))
