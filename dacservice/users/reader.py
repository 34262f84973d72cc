"""The user service's reader: one thread holding every connection, shared out by peer
(peers.py), until it has sent a whole line for the workers to check and answer (service.py);
and writing what the workers' replies' clients have not taken yet (`_Reader`).
"""

from __future__ import annotations

import collections
import errno
import itertools
import json
import resource
import selectors
import socket
import time

from daccore.errors import DacError, UserError
from daccore.services import munge
from dacservice.users.peers import MAX_QUEUED, PEER_QUEUED, Budget, Damper, Lines, Owners
from dacservice.users.replies import busy_error, error, finish, send_now, whose

__all__ = ["MAX_REQUEST", "READ_TIMEOUT", "MAX_PENDING", "RESERVE", "MAX_HELD_BYTES"]

#: bytes of one credential: a request payload is well under 1 KiB, its credential ~1.4x that
MAX_REQUEST = 8192
#: seconds a client has to send its credential, and to take its reply: a slow or silent client
#: holds no slot, and its connection no longer than this
READ_TIMEOUT = 5.0
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


class _Reader:
    """One reader thread accepts and reads every connection without blocking, until it holds
    a line: a connection that sends nothing or trickles costs a descriptor and a few bytes
    until READ_TIMEOUT, never a thread or a slot. It holds at most `capacity` connections and
    MAX_HELD_BYTES, shared out by peer (`_make_room`); a peer out of time or queue room has its
    new connections wait unread, costing a descriptor and no CPU (`_turn_wait`). A whole line
    shaped like a credential goes to `lines`, for the workers (service.py). A reply a worker
    could not write whole comes back here (`replies`), written as it is taken, until
    READ_TIMEOUT, so a client that never reads holds no thread."""

    def __init__(self, address: tuple[str, int]):
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
        # replies the workers could not send whole: (connection, peer, what is left)
        self.replies: collections.deque[tuple[socket.socket, str, bytes]] = collections.deque()
        self.lines = Lines()
        self.stopping = False

    def serve_forever(self) -> None:
        """The reader's loop, until `shutdown`."""
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
            return f"{PEER_QUEUED} requests {whose(peer)} wait to be checked"
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
            why = f"{PEER_QUEUED} requests {whose(conn.peer)} wait to be checked"
            self.damper.refused(conn.peer, f"busy: {why}")
            send_now(conn.sock, error(busy_error(why)))
        if dropped is not None:
            why = f"{MAX_QUEUED} requests wait to be checked, the most {whose(dropped[0])}"
            self.damper.refused(dropped[0], why)
            send_now(dropped[1], error(busy_error(why)))

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
            finish(conn.sock)

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
                self._refuse(conn, busy_error(why))
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
            conn.sock.send(json.dumps(error(e)).encode() + b"\n")
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return self._close(conn)
        if conn.unread:  # what it sent is read now, to its end, and thrown away
            self._forget_unread(conn)
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._shrink(conn, len(conn.data))
        self._move(conn, _DRAIN)

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
        why = f"it holds {len(self.conns)} connections, the most {whose(peer)}"
        self.damper.refused(peer, f"dropped: {why}")
        self._release(conn)  # before the close: the selector finds a closed socket by search
        if conn.phase == _READ:
            send_now(conn.sock, error(busy_error(why)))
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
