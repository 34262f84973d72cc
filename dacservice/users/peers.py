"""Sharing the user service out by peer before munged has said who is asking (issue 45).

Who sent a line is known only once munged has checked its credential; until then a flood of
forged, partial or unread requests must cost its sender, not the other users. The peer is the
uid that owns the connecting socket when it is on the service's own host (the kernel knows
it: `Owners`, a sock_diag lookup), else the connecting address. Its queued lines and unmunges
are capped and checked round robin across peers (`Lines`), its CPU time is metered
(`Budget`), and its refusals are logged at most every LOG_EVERY seconds (`Damper`).
The service that uses them is the rest of dacservice.users (reader.py, service.py).
"""

from __future__ import annotations

import collections
import logging
import socket
import struct
import threading
import time
from typing import Any

__all__ = [
    "Owners",
    "Lines",
    "Damper",
    "Budget",
    "USER_SHARE",
    "USER_BURST",
    "MAX_QUEUED",
    "PEER_QUEUED",
    "PEER_CHECKING",
    "LOG_EVERY",
]

log = logging.getLogger("dacservice.users")  # one log for the service, as before

#: of the service's CPU (its reader's and workers' threads), one peer, and one verified uid,
#: takes at most this share of one core over time, and USER_BURST seconds of it at once
#: (`Budget`); past that the peer's new connections wait unread and the uid's requests are
#: told busy, until it has time again. Slots bound how many requests run at once, not how much
#: CPU a stream of cheap ones takes, and a refusal costs CPU too: the service's CPU is the
#: Slurm controller's, and on a small machine every other user's dacctl's (issue 45)
USER_SHARE = 0.25
USER_BURST = 2.0
#: whole lines waiting to be checked; of one peer at most PEER_QUEUED (its next connections
#: wait unread for room); past MAX_QUEUED the peer with the most loses its newest
MAX_QUEUED = 1024
PEER_QUEUED = 128
#: one peer's lines in unmunge at once: lines are checked round robin across peers
PEER_CHECKING = 4
#: seconds between two log lines of one peer's refusals before authentication
LOG_EVERY = 10.0


#: linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_INET_DIAG_NOCOOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
#: inet_diag_msg's uid and inode, after the nlmsghdr, family/state/timer/retrans, the socket
#: id (48 bytes), expires, rqueue and wqueue
_UID_INODE = struct.Struct("=II")
_UID_AT = _HEADER.size + 4 + 48 + 12


def _packed(ip: str) -> tuple[int, bytes]:
    """(family, the address as inet_diag_sockid holds it); an IPv4 client of a dual-stack
    listener is an AF_INET socket on its side."""
    ip = ip.partition("%")[0]
    if ip.startswith("::ffff:") and "." in ip:
        ip = ip[len("::ffff:") :]
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return family, socket.inet_pton(family, ip).ljust(16, b"\0")


class Owners:
    """The peer of a connection, before it has sent a byte: `uid N` when the connecting socket
    is on this host and still held by a process, else `host ADDRESS`.

    The kernel records the uid that made each socket; sock_diag's exact lookup (NETLINK_SOCK_
    DIAG, the query `ss` makes) finds one TCP socket by its four ends: ~10 µs, no privilege,
    nothing the client can choose. A remote client's socket is not in this host's tables (not
    found: its address). A socket whose process has closed it reports uid 0 and no inode: its
    address too, never root. Used by the reader thread alone."""

    def __init__(self) -> None:
        self.nl: socket.socket | None = None
        self.seq = 0
        self.unavailable = False

    def of(self, sock: socket.socket, peer: tuple[Any, ...]) -> str:
        uid = None if self.unavailable else self._uid(sock, peer[0], peer[1])
        return f"uid {uid}" if uid is not None else f"host {peer[0]}"

    def close(self) -> None:
        if self.nl is not None:
            self.nl.close()

    def _socket(self) -> socket.socket | None:
        if self.nl is None and not self.unavailable:
            try:
                self.nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
            except OSError as e:
                self.unavailable = True
                log.warning(
                    "sock_diag is not available here (%s): users on this host are told apart "
                    "by their address only until the service restarts",
                    e.strerror or e,
                )
        return self.nl

    def _uid(self, sock: socket.socket, ip: str, port: int) -> int | None:
        nl = self._socket()
        if nl is None:
            return None
        try:
            here = sock.getsockname()
            family, theirs = _packed(ip)
            ours = _packed(here[0])[1]
            self.seq = (self.seq + 1) & 0xFFFFFFFF
            # inet_diag_req_v2: the peer's socket, whose source is the peer and whose
            # destination is us
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            request += struct.pack("!HH", port, here[1]) + theirs + ours
            request += struct.pack("=III", 0, _INET_DIAG_NOCOOKIE, _INET_DIAG_NOCOOKIE)
            nl.send(
                _HEADER.pack(
                    _HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, self.seq, 0
                )
                + request
            )
            while True:  # the kernel answers within the send: the reader never waits here
                reply = nl.recv(8192, socket.MSG_DONTWAIT)
                _, kind, _, seq, _ = _HEADER.unpack_from(reply)
                if seq == self.seq:  # an answer to an earlier query left unread is skipped
                    break
        except (OSError, ValueError, struct.error):  # BlockingIOError: no answer, so unknown
            return None
        if kind != _SOCK_DIAG_BY_FAMILY or len(reply) < _UID_AT + _UID_INODE.size:
            return None  # NLMSG_ERROR (ENOENT): not a socket of this host
        uid, inode = _UID_INODE.unpack_from(reply, _UID_AT)
        return uid if inode else None


# -- lines waiting for unmunge, shared out by peer ---------------------------------------------

#: a whole line waiting to be checked: (its peer, its connection, the line)
_Line = tuple[str, socket.socket, bytes]


class Lines:
    """Whole lines waiting for unmunge, a queue per peer, taken round robin: a peer's line
    waits for at most one of each other peer's, however many that peer sent. A peer has at
    most PEER_QUEUED waiting and PEER_CHECKING in unmunge; MAX_QUEUED wait in all, and past
    that the peer with the most loses its newest."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: dict[str, collections.deque[_Line]] = {}
        self.turns: collections.deque[str] = collections.deque()  # peers that may take a turn
        self.in_turns: set[str] = set()
        self.checking: dict[str, int] = {}
        self.total = 0
        self.closed = False

    def put(self, item: _Line) -> tuple[bool, _Line | None]:
        """(whether `item` waits now, another peer's line dropped to make room, or None)."""
        peer = item[0]
        with self.cond:
            mine = self.waiting.get(peer)
            if mine is not None and len(mine) >= PEER_QUEUED:
                return False, None
            dropped = None
            if self.total >= MAX_QUEUED:
                fullest = max(self.waiting, key=lambda p: len(self.waiting[p]))
                if mine is not None and len(mine) >= len(self.waiting[fullest]):
                    return False, None
                dropped = self.waiting[fullest].pop()
                self._shrunk(fullest)
            self.waiting.setdefault(peer, collections.deque()).append(item)
            self.total += 1
            self._may_take_turn(peer)
            return True, dropped

    def take(self) -> _Line | None:
        """The next line, blocking; None once closed."""
        with self.cond:
            while not self.turns and not self.closed:
                self.cond.wait()
            if self.closed:
                return None
            peer = self.turns.popleft()
            self.in_turns.discard(peer)
            item = self.waiting[peer].popleft()
            self._shrunk(peer)
            self.checking[peer] = self.checking.get(peer, 0) + 1
            self._may_take_turn(peer)
            return item

    def room(self, peer: str) -> int:
        """How many more of `peer`'s lines may wait."""
        with self.cond:
            return PEER_QUEUED - len(self.waiting.get(peer, ()))

    def done(self, peer: str) -> None:
        """One of `peer`'s lines has left unmunge."""
        with self.cond:
            self.checking[peer] -= 1
            if not self.checking[peer]:
                del self.checking[peer]
            self._may_take_turn(peer)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _shrunk(self, peer: str) -> None:
        self.total -= 1
        if not self.waiting[peer]:
            del self.waiting[peer]

    def _may_take_turn(self, peer: str) -> None:
        if (
            peer in self.waiting
            and peer not in self.in_turns
            and self.checking.get(peer, 0) < PEER_CHECKING
        ):
            self.turns.append(peer)
            self.in_turns.add(peer)
            self.cond.notify()


class Damper:
    """Refusals before authentication logged at most once per peer every LOG_EVERY seconds,
    with how many were not: a flood would otherwise write each of its connections to the log
    and the disk. Requests with a verified uid are all logged (`_Service._answer`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: dict[str, tuple[float, int]] = {}

    def refused(self, peer: str, why: object) -> None:
        now = time.monotonic()
        with self.lock:
            when, unsaid = self.last.get(peer, (0.0, 0))
            if when and now - when < LOG_EVERY:
                self.last[peer] = (when, unsaid + 1)
                return
            self.last[peer] = (now, 0)
            if len(self.last) > 4096:  # peers gone quiet are forgotten
                self.last = {p: v for p, v in self.last.items() if now - v[0] < LOG_EVERY}
        more = f" ({unsaid} more of this peer's refusals since the last line)" if unsaid else ""
        log.info("%s: refused: %s%s", peer, why, more)


class Budget:
    """Service time per peer or uid (`uid N`, `host ADDRESS`: a peer on this host and its
    verified uid are one key): spent CPU seconds are taken from it, it grows back at
    USER_SHARE a second up to USER_BURST. Shared by the reader and the workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.credit: dict[str, tuple[float, float]] = {}  # key -> (seconds it may spend, when)

    def spend(self, key: str, spent: float) -> int:
        """`spent` seconds taken from `key`'s time; whole seconds until it has time again, 0
        when it has."""
        now = time.monotonic()
        with self.lock:
            credit, when = self.credit.get(key, (USER_BURST, now))
            credit = min(USER_BURST, credit + (now - when) * USER_SHARE) - spent
            self.credit[key] = (credit, now)
            if len(self.credit) > 4096:  # keys whose time has grown back whole are forgotten
                self.credit = {
                    k: (c, t)
                    for k, (c, t) in self.credit.items()
                    if c + (now - t) * USER_SHARE < USER_BURST
                }
        return 0 if credit > 0 else int(-credit / USER_SHARE) + 1
