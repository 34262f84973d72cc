"""dac's user service: users' dacctl commands, answered for the uid munge vouches for.

Ordinary users hold no etcd credential (docs/security.md). Their `dacctl status`, `pools`,
`buffers`, `show`, `estimate`, `create-persistent` and `destroy-persistent` reach etcd through
this service, which runs as SlurmUser with its own credential on `user_service` (host:port).
Their dacctl asks with `daccore.services.user_client.ask`, which also holds the wire protocol:
one munge credential in, one JSON line out. The caller's rights come from the uid munged
verified and the system's group database, never from anything the client says (`caller`).

One user's flood must not slow another's command (issue 45), yet who sent a line is known only
once munged has checked it. So everything before that is shared out by the *peer*: the uid
that owns the connecting socket when it is on this host (the kernel knows it: `Owners`),
else the connecting address. Each peer's queued lines and unmunges are capped, lines are
checked round robin across peers (`Lines`), a peer that has spent its share of the service's
CPU (`Budget`) or filled its queue has its next connections wait unread, and when the reader
is full it is the peer holding the most that loses its oldest connection
(`_Service._make_room`). After munged, the verified uid's own slots and share take over.
"""

from __future__ import annotations

import collections
import errno
import itertools
import json
import logging
import resource
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from daccore.errors import AdminError, DacError, UserError
from daccore.services import munge
from daccore.services.user_client import MAGIC, munge_argv, run_munge, split_address
from daccore.services.user_requests import Caller, answer
from dacservice.peers import (
    MAX_QUEUED,
    PEER_QUEUED,
    Budget,
    Damper,
    Lines,
    Owners,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from daccore.settings.config import DacConfig
    from daccore.store import Store

#: a request waiting for one of its uid's slots: (connection, peer, uid, gid, origin, request)
_Task = tuple[socket.socket, str, int, int, str, dict[str, Any]]

__all__ = [
    "main",
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
#: seconds a client has to send its credential, and to take its reply: a slow or silent client
#: holds no slot, and its connection no longer than this
READ_TIMEOUT = 5.0
#: requests checked and answered at once (worker threads): a slot is taken only by a whole
#: line, and held past unmunge only by an authenticated request (create-persistent may wait
#: step_timeout for dacd, so a slot is not always short)
MAX_CLIENTS = 32
#: of those, one uid's at most; its further requests wait, holding no thread, up to MAX_PARKED
PER_UID = 4
MAX_PARKED = 64
#: connections the one reader thread holds at most (still sending their line, being told why
#: they are refused, or taking their reply), and fewer when the descriptor limit is lower
#: (`_capacity`). The service holds rather than drops: a flooder whose connections are held
#: has no descriptors left to knock with, while one whose connections are dropped opens them
#: again at once and keeps the kernel's listen queue, which every user shares, full.
MAX_PENDING = 65536
#: descriptors kept for what the reader does not hold: lines waiting for or in unmunge, parked
#: requests, etcd, munged's socket, the log
RESERVE = 2048
#: bytes the reader holds at most (lines still arriving, replies not yet taken)
MAX_HELD_BYTES = 64 << 20
#: the listen backlog (the kernel caps it at net.core.somaxconn), and connections accepted or
#: deadlines handled in one turn of the reader, so that neither starves the other
BACKLOG = 4096
ACCEPT_BATCH = 256
EXPIRE_BATCH = 256


def decode(credential: bytes, socket_path: str = "") -> tuple[int, int, dict[str, Any]]:
    """(uid, gid, request) from a credential, as munged verified it; UserError when munged
    refuses it (bad, altered, replayed, expired, another key) or its payload is no request."""
    uid, gid, _, request = decode_origin(credential, socket_path)
    return uid, gid, request


def decode_origin(credential: bytes, socket_path: str = "") -> tuple[int, int, str, dict[str, Any]]:
    """(uid, gid, origin, request): `decode`'s, and the address the encoding munged wrote
    into the credential (ENCODE_HOST: munged's own, which the client cannot choose), '' when
    munged gave none. In-job stages check it against the job's node (daccore.services.injob)."""
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


# -- who is at the other end, before any credential -------------------------------------------

# -- the service -------------------------------------------------------------------------------

_READ, _DRAIN, _WRITE = "read", "drain", "write"
#: how long a connection may stay in each phase
_TIMEOUTS = {_READ: READ_TIMEOUT, _DRAIN: 1.0, _WRITE: READ_TIMEOUT}


class _Conn:
    """A connection the reader holds: its peer, its phase (reading its line, being refused,
    taking its reply), the bytes read or still to send, until when, and whether it waits
    unread for its peer's turn."""

    __slots__ = ("sock", "peer", "phase", "data", "deadline", "unread")

    def __init__(self, sock: socket.socket, peer: str):
        self.sock, self.peer, self.phase, self.data, self.deadline = sock, peer, _READ, b"", 0.0
        self.unread = False  # accepted, waiting for its peer's turn: not in the selector


def _capacity() -> int:
    """Connections the reader may hold: MAX_PENDING, less where the descriptor limit is lower
    (RESERVE of them kept for the rest of the service)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_PENDING
    return max(16, min(MAX_PENDING, max(soft // 2, soft - RESERVE)))


class _Service:
    """One reader thread accepts and reads every connection without blocking, until it holds
    a line: a connection that sends nothing or trickles costs a descriptor and a few bytes
    until READ_TIMEOUT, never a thread or a slot. It holds at most `capacity` connections and
    MAX_HELD_BYTES, shared out by peer (`_make_room`); a peer out of time or queue room has its
    new connections wait unread, costing a descriptor and no CPU (`_turn_wait`). A whole line
    shaped like a credential goes to `Lines`, where MAX_CLIENTS threads take them round robin
    across peers for unmunge; then the request is answered in one of the caller's PER_UID
    slots, or waits (parked, holding no thread) for one of that uid's requests to end. A reply
    is written without blocking: what the client does not take at once, the reader writes as
    it is taken, until READ_TIMEOUT, so a client that never reads holds no thread."""

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
        self.wake_w.setblocking(False)  # a worker never waits on the reader
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.capacity = _capacity()
        self.owners = Owners()
        self.damper = Damper()
        self.budget = Budget()
        # the reader's alone: every connection it holds, by phase in deadline order, by peer
        # oldest first, and the bytes each peer's hold
        self.conns: dict[socket.socket, _Conn] = {}
        self.phases: dict[str, dict[socket.socket, _Conn]] = {p: {} for p in _TIMEOUTS}
        self.by_peer: dict[str, dict[socket.socket, _Conn]] = {}
        self.unread: dict[str, dict[socket.socket, _Conn]] = {}  # by peer, oldest first
        self.bytes_of: collections.Counter[str] = collections.Counter()
        self.held_bytes = 0
        self.replies: collections.deque[tuple[socket.socket, str, bytes]] = collections.deque()
        self.lines = Lines()
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
        late = False
        while not self.stopping:
            for key, events in self.selector.select(0 if late else self._wait()):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is self.wake_r:
                    self._drain_wake()
                else:
                    started = time.thread_time()
                    if events & selectors.EVENT_WRITE:
                        self._writable(key.data)
                    else:
                        self._readable(key.data)
                    self.budget.spend(key.data.peer, time.thread_time() - started)
            self._take_turns()
            late = self._expire(time.monotonic())
        self.lines.close()
        self.owners.close()

    def shutdown(self) -> None:
        self.stopping = True
        self._wake()

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass  # full: the reader has a wake-up waiting already

    def _wait(self) -> float:
        firsts = [next(iter(d.values())).deadline for d in self.phases.values() if d]
        most = 0.05 if self.unread else 0.5  # a waiting peer's time grows back meanwhile
        return min([most, *(max(0.0, t - time.monotonic()) for t in firsts)])

    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self.replies:  # replies the workers could not send whole
            sock, peer, rest = self.replies.popleft()
            conn = _Conn(sock, peer)
            self.selector.register(sock, selectors.EVENT_WRITE, conn)
            self._hold(conn, _WRITE, rest)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):  # then the others get their turn
            try:
                sock, address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as e:  # out of descriptors: the fullest peer's oldest goes
                if e.errno in (errno.EMFILE, errno.ENFILE) and self.conns:
                    self._evict(self._fullest(None, by_bytes=False))
                    continue
                return
            started = time.thread_time()
            sock.setblocking(False)
            conn = _Conn(sock, self.owners.of(sock, address))
            self._hold(conn, _READ, b"")
            if sock not in self.conns:
                pass  # the service was full, and this was its peer's oldest
            elif conn.peer in self.unread or self._turn_wait(conn.peer):
                conn.unread = True  # costs a descriptor, and no CPU, until its peer's turn
                self.unread.setdefault(conn.peer, {})[sock] = conn
            else:
                self.selector.register(sock, selectors.EVENT_READ, conn)
                self._readable(conn)  # dacctl sends its line at once: often there already
            self.budget.spend(conn.peer, time.thread_time() - started)

    def _turn_wait(self, peer: str) -> str:
        """Why `peer`'s next connection must wait unread ('' when it need not): it has spent
        its time, or as many of its lines wait to be checked as may."""
        wait = self.budget.spend(peer, 0.0)
        if wait:
            return f"your requests took their share of it: {wait}s to wait"
        if not self.lines.room(peer):
            return f"{PEER_QUEUED} requests {_of(peer)} wait to be checked"
        return ""

    def _take_turns(self) -> None:
        """Connections that waited unread are read, oldest first, as far as their peer's time
        and room in its queue allow."""
        for peer in list(self.unread):
            started = time.thread_time()
            room = 0 if self.budget.spend(peer, 0.0) else self.lines.room(peer)
            for conn in list(itertools.islice(self.unread.get(peer, {}).values(), room)):
                if conn.unread:  # not dropped by the ones before it
                    self._forget_unread(conn)
                    self.selector.register(conn.sock, selectors.EVENT_READ, conn)
                    self._readable(conn)
            self.budget.spend(peer, time.thread_time() - started)

    def _readable(self, conn: _Conn) -> None:
        if conn.sock not in self.conns:
            return  # dropped meanwhile
        wanted = 65536 if conn.phase == _DRAIN else MAX_REQUEST + 1 - len(conn.data)
        try:
            chunk = conn.sock.recv(wanted)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if conn.phase == _DRAIN:
            if not chunk:
                self._close(conn)
            return
        self._grow(conn, chunk)
        if conn.sock not in self.conns:
            return  # it made the service too full, and was its peer's oldest
        if len(conn.data) > MAX_REQUEST:
            return self._refuse(conn, UserError(f"request larger than {MAX_REQUEST} bytes"))
        if b"\n" not in conn.data and chunk:
            return
        self._line(conn, conn.data.split(b"\n", 1)[0].strip())

    def _line(self, conn: _Conn, line: bytes) -> None:
        """A whole line: refused here unless shaped like a credential, else queued for unmunge
        (or its peer told it has too many waiting)."""
        if not line.startswith(b"MUNGE:"):
            return self._refuse(
                conn, UserError("request is not a munge credential (run dacctl, which makes one)")
            )
        if not munge.well_formed(line):  # munge_strerror's words for EMUNGE_BAD_CRED
            return self._refuse(conn, UserError("credential refused: Invalid credential format"))
        self._release(conn)  # first: once queued, a worker may answer and close it at once
        queued, dropped = self.lines.put((conn.peer, conn.sock, line))
        if not queued:
            why = f"{PEER_QUEUED} requests {_of(conn.peer)} wait to be checked"
            self.damper.refused(conn.peer, f"busy: {why}")
            self._send_now(conn.sock, _error(_busy_error(why)))
        if dropped is not None:
            why = f"{MAX_QUEUED} requests wait to be checked, the most {_of(dropped[0])}"
            self.damper.refused(dropped[0], why)
            self._send_now(dropped[1], _error(_busy_error(why)))

    def _writable(self, conn: _Conn) -> None:
        if conn.sock not in self.conns:
            return
        try:
            sent = conn.sock.send(conn.data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._close(conn)
        self._shrink(conn, sent)
        if not conn.data:
            self._release(conn)
            _finish(conn.sock)

    def _expire(self, now: float) -> bool:
        """Connections past their deadline: refused, or closed; True when more remain than
        one turn handles (the reader takes no wait before the next)."""
        for _ in range(EXPIRE_BATCH):
            due = [d for d in self.phases.values() if d and next(iter(d.values())).deadline <= now]
            if not due:
                return False
            conn, started = next(iter(due[0].values())), time.thread_time()
            if conn.unread:
                why = self._turn_wait(conn.peer) or "it held your request past its deadline"
                self._refuse(conn, _busy_error(why))
            elif conn.phase == _READ:
                self._refuse(conn, UserError(f"request not received within {READ_TIMEOUT:.0f}s"))
            else:
                if conn.phase == _WRITE:
                    self.damper.refused(conn.peer, f"reply not taken within {READ_TIMEOUT:.0f}s")
                self._close(conn)
            self.budget.spend(conn.peer, time.thread_time() - started)
        return True

    def _refuse(self, conn: _Conn, e: DacError) -> None:
        """A refusal before any credential was checked, sent from here: the send fits the
        socket's buffer, and what the client still sends is read for up to a second before
        the close (closing with unread bytes would reset the connection, and a reset makes the
        client's kernel drop the reply before dacctl reads it)."""
        self.damper.refused(conn.peer, e)
        try:
            conn.sock.send(json.dumps(_error(e)).encode() + b"\n")
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return self._close(conn)
        if conn.unread:  # what it sent is read now, to its end, and thrown away
            self._forget_unread(conn)
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._shrink(conn, len(conn.data))
        self._move(conn, _DRAIN)

    def _send_now(self, sock: socket.socket, reply: dict[str, Any]) -> None:
        """A short reply to a connection the reader no longer holds, then the close."""
        try:
            sock.send(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass
        _finish(sock)

    # -- what the reader holds, and who loses when it is full -----------------------------------

    def _hold(self, conn: _Conn, phase: str, data: bytes) -> None:
        conn.phase, conn.deadline = phase, time.monotonic() + _TIMEOUTS[phase]
        self.conns[conn.sock] = conn
        self.phases[phase][conn.sock] = conn
        self.by_peer.setdefault(conn.peer, {})[conn.sock] = conn
        self._grow(conn, data)
        self._make_room(conn.peer)

    def _move(self, conn: _Conn, phase: str) -> None:
        del self.phases[conn.phase][conn.sock]
        conn.phase, conn.deadline = phase, time.monotonic() + _TIMEOUTS[phase]
        self.phases[phase][conn.sock] = conn

    def _grow(self, conn: _Conn, data: bytes) -> None:
        """`data` added to what `conn` holds; past MAX_HELD_BYTES someone's oldest goes."""
        conn.data += data
        self.bytes_of[conn.peer] += len(data)
        self.held_bytes += len(data)
        if self.held_bytes > MAX_HELD_BYTES:
            self._make_room(conn.peer)

    def _shrink(self, conn: _Conn, sent: int) -> None:
        """The first `sent` bytes `conn` holds let go of."""
        conn.data = conn.data[sent:]
        self.bytes_of[conn.peer] -= sent
        self.held_bytes -= sent

    def _make_room(self, peer: str) -> None:
        """Past the capacity or MAX_HELD_BYTES, the peer holding the most (connections, or
        bytes) loses its oldest connection, until both hold: a peer holding little is never
        the one to lose while another holds more."""
        while len(self.conns) > self.capacity:
            self._evict(self._fullest(peer, by_bytes=False))
        while self.held_bytes > MAX_HELD_BYTES:
            self._evict(self._fullest(peer, by_bytes=True))

    def _fullest(self, peer: str | None, by_bytes: bool) -> str:
        """The peer holding the most: `peer` itself when it holds its fair share or more (the
        flooder, nearly always: no search), else the largest."""

        def size(p: str) -> int:
            return self.bytes_of[p] if by_bytes else len(self.by_peer[p])

        total = self.held_bytes if by_bytes else len(self.conns)
        if peer in self.by_peer and size(peer) * len(self.by_peer) >= total:
            return peer
        return max(self.by_peer, key=size)

    def _evict(self, peer: str) -> None:
        conn = next(iter(self.by_peer[peer].values()))
        why = f"it holds {len(self.conns)} connections, the most {_of(peer)}"
        self.damper.refused(peer, f"dropped: {why}")
        self._release(conn)  # before the close: the selector finds a closed socket by search
        if conn.phase == _READ:
            self._send_now(conn.sock, _error(_busy_error(why)))
        else:
            conn.sock.close()

    def _release(self, conn: _Conn) -> None:
        """`conn` no longer the reader's (handed on, or about to close)."""
        self.conns.pop(conn.sock, None)
        self.phases[conn.phase].pop(conn.sock, None)
        mine = self.by_peer.get(conn.peer)
        if mine is not None:
            mine.pop(conn.sock, None)
            if not mine:
                del self.by_peer[conn.peer]
        if conn.data:
            self.bytes_of[conn.peer] -= len(conn.data)
            self.held_bytes -= len(conn.data)
            conn.data = b""
        if not self.bytes_of[conn.peer]:
            del self.bytes_of[conn.peer]
        if conn.unread:
            self._forget_unread(conn)
            return
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _forget_unread(self, conn: _Conn) -> None:
        conn.unread = False
        waiting = self.unread.get(conn.peer)
        if waiting is not None:
            waiting.pop(conn.sock, None)
            if not waiting:
                del self.unread[conn.peer]

    def _close(self, conn: _Conn) -> None:
        self._release(conn)
        conn.sock.close()

    # -- the workers ----------------------------------------------------------------------------

    def _worker(self) -> None:
        while (item := self.lines.take()) is not None:
            peer, started = item[0], time.thread_time()
            try:
                task = self._check(*item)
            finally:
                self.lines.done(peer)
            spent = time.thread_time() - started
            if task is None:
                self.budget.spend(peer, spent)
            else:
                self._serve(task, spent)

    def _check(self, peer: str, sock: socket.socket, line: bytes) -> _Task | None:
        """The request a line carries, as munged verified it; None when refused (answered)."""
        try:
            uid, gid, origin, request = decode_origin(line, self.config.munge_socket)
        except AdminError as e:  # munged unreachable: the site's problem, every time
            log.warning("%s: not checked: %s", peer, e)
            self._reply(sock, peer, _error(e))
            return None
        except DacError as e:
            self.damper.refused(peer, e)
            self._reply(sock, peer, _error(e))
            return None
        except Exception:  # noqa: BLE001 - as in _answer
            log.exception("%s: failed before its credential was checked", peer)
            self._reply(sock, peer, _INTERNAL)
            return None
        return sock, peer, uid, gid, origin, request

    def _serve(self, new: _Task, spent: float) -> None:
        """`new` answered in one of its uid's slots, then that uid's parked requests; or
        parked itself when the uid has none free; or refused when the uid has no time left
        (`spent`, its unmunge's, counted first) or too many requests under way."""
        uid = new[2]
        task: _Task | None = None
        why = ""
        wait = self.budget.spend(f"uid {uid}", spent)
        with self.lock:
            if wait:
                why = f"your requests took their share of it: {wait}s to wait"
            elif self.active.get(uid, 0) < PER_UID:
                self.active[uid] = self.active.get(uid, 0) + 1
                task = new
            elif len(waiting := self.parked.setdefault(uid, collections.deque())) < MAX_PARKED:
                waiting.append(new)
            else:
                why = f"{PER_UID + MAX_PARKED} requests of yours are under way"
        if why:
            self.damper.refused(f"uid {uid}", f"busy: {why}")
            self._reply(new[0], new[1], _error(_busy_error(why)))
        while task is not None:  # then this uid's parked requests, one by one
            sock, peer, uid, gid, origin, request = task
            started = time.thread_time()
            try:
                self._reply(sock, peer, self._answer(uid, gid, request, origin))
            finally:
                self.budget.spend(f"uid {uid}", time.thread_time() - started)
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

    def _reply(self, sock: socket.socket, peer: str, reply: dict[str, Any]) -> None:
        """The reply, without blocking: whole, then the close; or what the client has not
        taken handed to the reader, which writes it as it is taken (`_writable`), so a client
        that never reads holds no worker. The request was read to its end, so the close is no
        reset."""
        data = json.dumps(reply).encode() + b"\n"
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the client went away: nothing more is owed to it
            sock.close()
            return
        if sent == len(data):
            _finish(sock)
            return
        self.replies.append((sock, peer, data[sent:]))
        self._wake()


_INTERNAL: dict[str, Any] = {
    "error": {
        "kind": "internal",
        "message": ("dac's user service failed on this request: an admin finds why in its log"),
    }
}


def _error(e: DacError) -> dict[str, Any]:
    return {"error": {"kind": e.kind.value, "message": str(e)}}


def _busy_error(why: str) -> AdminError:
    return AdminError(f"dac's user service is busy ({why}): try again")


def _of(peer: str) -> str:
    """Whose, in a busy line: the peer's own, as the user it names reads it."""
    return "of yours" if peer.startswith("uid ") else "from your host"


def _finish(sock: socket.socket) -> None:
    """The end of a reply: the write side shut, then the close."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    sock.close()


def _more_descriptors() -> None:
    """Every descriptor the hard limit allows, and a hard limit raised to what the reader may
    hold where the service may raise it (CAP_SYS_RESOURCE: the local DAC's root): each
    connection held is one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_PENDING + RESERVE
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return
        except (ValueError, OSError):
            pass
    if soft != hard:
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
        "dac user service on %s (munge socket %s; at most %d connections held)",
        config.user_service,
        config.munge_socket or "munge's default",
        server.capacity,
    )
    if ready:
        ready()
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """`dac-user-service`: dac's user service, run as SlurmUser under systemd
    (daccore/share/packaging/dac-users.service) with the config DAC_CONFIG names; it answers
    users' status, pools, buffers, show, create-persistent and destroy-persistent for the uid
    their munge credential proves, on the config's user_service (host:port). A DacError is one
    line on stderr and the exit code of its kind."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="dac-user-service", description=main.__doc__)
    p.add_argument("--debug", action="store_true", help="a traceback with an error")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s dac-user-service[%(process)d] %(message)s"
    )
    from daccore.escape import printable
    from daccore.settings.config import load_config

    try:
        serve(load_config())
    except DacError as e:
        if args.debug:
            raise
        print(printable(f"dac-user-service: {e.kind.value} error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # before serve() took SIGINT over
        print("dac-user-service: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # root's daemons start as `python -I -m dacservice.users` (daclocal)
    raise SystemExit(main())
