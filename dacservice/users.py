"""dac's user service: users' dacctl commands, answered for the uid munge vouches for.

Ordinary users hold no etcd credential (docs/security.md). Their `dacctl status`, `pools`,
`buffers`, `show`, `estimate`, `create-persistent` and `destroy-persistent` reach etcd through
this service, which runs as SlurmUser with its own credential on `user_service` (host:port).
Their dacctl asks with `daccore.services.user_client.ask`, which also holds the wire protocol:
one munge credential in, one JSON line out. The caller's rights come from the uid munged
verified and the system's group database, never from anything the client says (`caller`).
"""

from __future__ import annotations

import collections
import errno
import json
import logging
import queue
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from daccore.errors import AdminError, DacError, UserError
from daccore.services.user_client import MAGIC, munge_argv, run_munge, split_address
from daccore.services.user_requests import Caller, answer

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from daccore.settings.config import DacConfig
    from daccore.store import Store

#: a request waiting for one of its uid's slots: (connection, uid, gid, origin, request)
_Task = tuple[socket.socket, int, int, str, dict[str, Any]]

__all__ = [
    "serve",
    "caller",
    "decode",
    "decode_origin",
    "MAX_REQUEST",
    "READ_TIMEOUT",
    "MAX_CLIENTS",
    "PER_UID",
    "MAX_PENDING",
]

log = logging.getLogger(__name__)

#: bytes of one credential: a request payload is well under 1 KiB, its credential ~1.4x that
MAX_REQUEST = 8192
#: seconds a client has to send its credential: a slow or silent client holds no slot longer
READ_TIMEOUT = 5.0
#: requests checked and answered at once (worker threads): a slot is taken only by a whole
#: line, and held past unmunge only by an authenticated request (create-persistent may wait
#: step_timeout for dacd, so a slot is not always short)
MAX_CLIENTS = 32
#: of those, one uid's at most; its further requests wait, holding no thread, up to MAX_PARKED
PER_UID = 4
MAX_PARKED = 64
#: connections still sending their line, held by the one reader thread; past this many the
#: oldest is dropped (each costs a descriptor and at most MAX_REQUEST bytes)
MAX_PENDING = 4096
#: whole lines waiting for a worker; past this many a line is told the service is busy
MAX_QUEUED = 1024
#: the listen backlog (the kernel caps it at net.core.somaxconn), and connections accepted in
#: one turn of the reader
BACKLOG = 4096
ACCEPT_BATCH = 256


def decode(credential: bytes, socket_path: str = "") -> tuple[int, int, dict[str, Any]]:
    """(uid, gid, request) from a credential, as munged verified it; UserError when munged
    refuses it (bad, altered, replayed, expired, another key) or its payload is no request."""
    uid, gid, _, request = decode_origin(credential, socket_path)
    return uid, gid, request


def decode_origin(credential: bytes, socket_path: str = "") -> tuple[int, int, str, dict[str, Any]]:
    """(uid, gid, origin, request): `decode`'s, and the address the encoding munged wrote
    into the credential (ENCODE_HOST: munged's own, which the client cannot choose), '' when
    munged gave none. In-job stages check it against the job's node (daccore.services.injob)."""
    from daccore.services import munge

    if munge.available():
        try:
            uid, gid, origin, payload = munge.decode(credential, socket_path)
        except munge.MungeRefused as e:
            raise UserError(f"credential refused: {str(e)[:200]}") from None
        except munge.MungeError as e:
            raise AdminError(
                f"the user service cannot reach munged: {str(e)[:200]} (an admin must check "
                "munged on the service's host)"
            ) from None
        return uid, gid, origin, _request(payload)
    r = run_munge(munge_argv("unmunge", socket_path), credential)
    meta, _, payload = r.stdout.partition(b"\n\n")
    # "STATUS: Replayed credential (17)", "UID: alice (1234)": the text, then the number
    fields = {
        k.strip(): v.strip().decode(errors="replace")
        for k, _, v in (line.partition(b":") for line in meta.splitlines())
    }
    status = fields.get(b"STATUS", "")
    if r.returncode != 0 or not status.endswith("(0)"):
        why = status.rpartition(" (")[0] or " ".join(r.stderr.decode(errors="replace").split())
        raise UserError(f"credential refused: {why.removeprefix('unmunge: Error: ')[:200]}")
    try:
        uid, gid = (int(fields[k].rpartition("(")[2].rstrip(")")) for k in (b"UID", b"GID"))
    except (KeyError, ValueError):
        raise UserError("credential refused: its payload is not a dac request") from None
    request = _request(payload)
    # "ENCODE_HOST: node1 (10.0.0.1)": the address in parentheses
    origin = fields.get(b"ENCODE_HOST", "").rpartition("(")[2].rstrip(")")
    return uid, gid, origin, request


def _request(payload: bytes) -> dict[str, Any]:
    """The dac request a credential carries; UserError when it carries something else."""
    try:
        request = json.loads(payload)
    except ValueError:
        raise UserError("credential refused: its payload is not a dac request") from None
    if not isinstance(request, dict) or request.get("magic") != MAGIC:
        raise UserError("credential refused: its payload is not a dac request")
    return request


def caller(uid: int, gid: int, admin_group: str, origin: str = "") -> Caller:
    """The rights of `uid`, from the group database: its primary group as munge gave it and
    the groups the system lists it in (a user unknown to passwd has only the munge gid)."""
    from daccore.rules.rights import groups_of, rights

    return Caller(uid, gid, rights(uid, groups_of(uid, gid), admin_group), origin)


class _Conn:
    """A connection the reader holds: what it sent so far, until when it may send the rest."""

    __slots__ = ("sock", "data", "deadline", "draining")

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.data, self.deadline, self.draining = sock, b"", deadline, False


class _Service:
    """One reader thread reads every connection, without blocking, until it holds a line: a
    connection that sends nothing or trickles costs a file descriptor and a few bytes until
    READ_TIMEOUT, never a thread or a slot (at most MAX_PENDING of them; past that the oldest
    is dropped). A whole line goes to WORKERS threads: unmunge first, then the request is
    answered in one of the caller's PER_UID slots, or waits (parked, holding no thread) for
    one of that uid's requests to end; MAX_CLIENTS requests are answered at once at most."""

    def __init__(self, address: tuple[str, int], config: DacConfig, store: Store):
        self.config, self.store = config, store
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(address)
        self.listener.listen(BACKLOG)  # the kernel caps it at net.core.somaxconn
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.conns: dict[socket.socket, _Conn] = {}  # in accept order: the oldest first
        self.work: queue.Queue[tuple[socket.socket, bytes] | None] = queue.Queue(MAX_QUEUED)
        self.lock = threading.Lock()
        self.active: dict[int, int] = {}  # uid -> requests being answered
        self.parked: dict[int, collections.deque[_Task]] = {}  # uid -> requests waiting for a slot
        self.stopping = False
        self.workers = [
            threading.Thread(target=self._worker, daemon=True, name=f"usvc-{i}")
            for i in range(MAX_CLIENTS)
        ]

    # -- the reader -----------------------------------------------------------------------------

    def serve_forever(self) -> None:
        for t in self.workers:
            t.start()
        while not self.stopping:
            now = time.monotonic()
            first = next(iter(self.conns.values()), None)
            wait = 0.5 if first is None else min(0.5, max(0.0, first.deadline - now))
            for key, _ in self.selector.select(wait):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is self.wake_r:
                    self._drain_wake()
                else:
                    self._readable(key.data)
            self._expire(time.monotonic())
        for _ in self.workers:
            self.work.put(None)

    def shutdown(self) -> None:
        self.stopping = True
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):  # then the others get their turn
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as e:  # out of descriptors: the oldest waiting connection goes
                if e.errno in (errno.EMFILE, errno.ENFILE) and self.conns:
                    self._close(next(iter(self.conns.values())))
                    continue
                return
            if len(self.conns) >= MAX_PENDING:
                self._close(next(iter(self.conns.values())))
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + READ_TIMEOUT)
            self.conns[sock] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)
            self._readable(conn)  # dacctl sends its line at once: often there already

    def _readable(self, conn: _Conn) -> None:
        if conn.sock not in self.conns:
            return  # dropped meanwhile
        try:
            chunk = conn.sock.recv(MAX_REQUEST + 1 - len(conn.data) if not conn.draining else 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if conn.draining:
            if not chunk:
                self._close(conn)
            return
        conn.data += chunk
        if len(conn.data) > MAX_REQUEST:
            return self._refuse(conn, UserError(f"request larger than {MAX_REQUEST} bytes"))
        if b"\n" not in conn.data and chunk:
            return
        line = conn.data.split(b"\n", 1)[0].strip()
        if not line.startswith(b"MUNGE:"):
            return self._refuse(
                conn, UserError("request is not a munge credential (run dacctl, which makes one)")
            )
        self._forget(conn)
        try:
            self.work.put_nowait((conn.sock, line))
        except queue.Full:
            _send(conn.sock, _busy(f"{MAX_QUEUED} requests wait to be checked"))

    def _expire(self, now: float) -> None:
        while self.conns:
            conn = next(iter(self.conns.values()))
            if conn.deadline > now:
                return
            if conn.draining:
                self._close(conn)
            else:
                self._refuse(conn, UserError(f"request not received within {READ_TIMEOUT:.0f}s"))

    def _refuse(self, conn: _Conn, e: DacError) -> None:
        """A refusal before any credential was checked, sent from here: the send fits the
        socket's buffer, and what the client still sends is read for up to a second before
        the close (closing with unread bytes would reset the connection, and a reset makes the
        client's kernel drop the reply before dacctl reads it)."""
        log.info("uid None: null: refused: %s", e)
        try:
            conn.sock.send(json.dumps(_error(e)).encode() + b"\n")
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return self._close(conn)
        del self.conns[conn.sock]  # to the end of the line, with a new deadline
        conn.draining, conn.deadline = True, time.monotonic() + 1.0
        self.conns[conn.sock] = conn

    def _forget(self, conn: _Conn) -> None:
        self.conns.pop(conn.sock, None)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _close(self, conn: _Conn) -> None:
        self._forget(conn)
        conn.sock.close()

    # -- the workers ----------------------------------------------------------------------------

    def _worker(self) -> None:
        while (item := self.work.get()) is not None:
            sock, line = item
            uid = None
            try:
                uid, gid, origin, request = decode_origin(line, self.config.munge_socket)
            except DacError as e:
                log.info("uid None: null: refused: %s", e)
                _send(sock, _error(e))
                continue
            except Exception:  # noqa: BLE001 - as in _answer
                log.exception("uid None: null: failed")
                _send(sock, _INTERNAL)
                continue
            new: _Task = (sock, uid, gid, origin, request)
            task: _Task | None = new
            full = False
            with self.lock:
                if self.active.get(uid, 0) >= PER_UID:
                    waiting = self.parked.setdefault(uid, collections.deque())
                    if len(waiting) < MAX_PARKED:
                        waiting.append(new)
                        task = None
                    else:
                        task, full = None, True
                else:
                    self.active[uid] = self.active.get(uid, 0) + 1
            if task is None:
                if full:
                    log.info(
                        "uid %s: refused: %d requests of this uid under way",
                        uid,
                        PER_UID + MAX_PARKED,
                    )
                    _send(sock, _busy(f"{PER_UID + MAX_PARKED} requests of yours are under way"))
                continue
            while task is not None:  # then this uid's parked requests, one by one
                sock, uid, gid, origin, request = task
                try:
                    _send(sock, self._answer(uid, gid, request, origin))
                finally:
                    task = self._next_of(uid)

    def _next_of(self, uid: int) -> _Task | None:
        with self.lock:
            waiting = self.parked.get(uid)
            if waiting:
                task = waiting.popleft()
                if not waiting:
                    del self.parked[uid]
                return task
            self.active[uid] -= 1
            if not self.active[uid]:
                del self.active[uid]
            return None

    def _answer(
        self, uid: int, gid: int, request: dict[str, Any], origin: str = ""
    ) -> dict[str, Any]:
        verb = request.get("verb")
        try:
            who = caller(uid, gid, self.config.admin_group, origin)
            result = answer(self.store, self.config, who, verb, request.get("args", {}))
            log.info("uid %s: %s %s: ok", uid, json.dumps(verb), json.dumps(request.get("args")))
            return {"ok": result}
        except DacError as e:
            log.info("uid %s: %s: refused: %s", uid, json.dumps(verb), e)
            return _error(e)
        except Exception:  # a bug must not end the service, nor reach the user as a traceback
            log.exception("uid %s: %s: failed", uid, json.dumps(verb))
            return _INTERNAL


_INTERNAL: dict[str, Any] = {
    "error": {
        "kind": "internal",
        "message": ("dac's user service failed on this request: an admin finds why in its log"),
    }
}


def _error(e: DacError) -> dict[str, Any]:
    return {"error": {"kind": e.kind.value, "message": str(e)}}


def _busy(why: str) -> dict[str, Any]:
    return {"error": {"kind": "admin", "message": f"dac's user service is busy ({why}): try again"}}


def _send(sock: socket.socket, reply: dict[str, Any]) -> None:
    """The reply, then the close; a client that does not read it within READ_TIMEOUT loses it.
    The request was read to its end, so the close is no reset."""
    try:
        sock.setblocking(True)
        sock.settimeout(READ_TIMEOUT)
        sock.sendall(json.dumps(reply).encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the client went away: nothing more is owed to it
    finally:
        sock.close()


def _more_descriptors() -> None:
    """Every descriptor the hard limit allows: each waiting connection holds one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(config: DacConfig, ready: Callable[[], object] | None = None) -> None:
    """Answer requests on `config.user_service` until SIGTERM/SIGINT; `ready()` is called
    once the port is listening."""
    import signal

    from daccore.store import Store

    if not config.user_service:
        raise AdminError(
            "user_service is not set in the config: set it to host:port (docs/security.md)"
        )
    store = Store.from_settings(config.etcd, role="slurm")  # Slurm's rights, no more
    from daccore.records import models  # noqa: F401 - loaded now, not by the first request

    _more_descriptors()
    try:
        server = _Service(split_address(config.user_service), config, store)
    except OSError as e:
        raise AdminError(
            f"user service cannot listen on {config.user_service}: {e.strerror}"
        ) from None

    def stop(signum: int, frame: FrameType | None) -> None:
        server.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "dac user service on %s (munge socket %s)",
        config.user_service,
        config.munge_socket or "munge's default",
    )
    if ready:
        ready()
    server.serve_forever()
