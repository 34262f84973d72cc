"""How dac's user service shares itself out before and after munged (dacservice.users, issue
45), piece by piece on this process's own sockets: who a peer is (`Owners`), lines checked
round robin across peers (`Lines`), each peer's and uid's time (`Budget`), who loses a
connection when the reader is full (`_Reader._make_room`), and a reply the client never
reads (`_Service._reply`). Two real users flooding a real service:
tests/security/test_usersvc_service.py and bench/usersvc_flood.py."""

import os
import socket
import time
from typing import Any

import pytest

from daccore.settings.config import DacConfig
from dacservice.users import peers, reader
from dacservice.users.peers import Budget, Lines
from dacservice.users.reader import _READ, _WRITE, _Conn
from dacservice.users.service import _Service


@pytest.fixture
def service():
    """The service, its port bound on loopback, no thread started; closed after."""
    store: Any = object()  # no request reaches a store here
    made = _Service(("127.0.0.1", 0), DacConfig(), store)
    yield made
    for sock in [made.listener, made.wake_r, made.wake_w, *made.conns]:
        sock.close()
    made.selector.close()
    made.owners.close()


def connect(service):
    """(the client's socket, the service's end as accepted)."""
    client = socket.create_connection(service.listener.getsockname())
    service.listener.setblocking(True)
    accepted, address = service.listener.accept()
    service.listener.setblocking(False)
    return client, accepted, address


def test_a_peer_on_this_host_is_the_uid_owning_its_socket(service):
    client, accepted, address = connect(service)
    assert service.owners.of(accepted, address) == f"uid {os.geteuid()}"
    client.close()  # its process let go of it: uid 0 and no inode, so its address, not root
    time.sleep(0.05)
    assert service.owners.of(accepted, address) == f"host {address[0]}"
    accepted.close()


def test_a_peer_the_kernel_does_not_know_is_its_address(service):
    client, accepted, (ip, port) = connect(service)
    # a client on another host: no socket of this host has its ends (here, a port none has)
    assert service.owners.of(accepted, (ip, 1)) == f"host {ip}"
    service.owners.unavailable = True  # no sock_diag (a seccomp filter, say): addresses alone
    assert service.owners.of(accepted, (ip, port)) == f"host {ip}"
    client.close()
    accepted.close()


def item(peer: str, line: bytes) -> Any:
    """A line of `peer`'s as the reader queues it, without its connection."""
    return (peer, None, line)


def next_peer(lines: Lines) -> str:
    taken = lines.take()
    assert taken is not None
    return taken[0]


def test_lines_are_taken_round_robin_across_peers():
    lines = Lines()
    for i in range(100):
        assert lines.put(item("uid 5678", b"flood %d" % i)) == (True, None)
    assert lines.put(item("uid 1234", b"mine")) == (True, None)
    taken = [lines.take() for _ in range(3)]
    assert [t[2] for t in taken if t] == [b"flood 0", b"mine", b"flood 1"]


def test_a_peer_has_at_most_its_queue_and_its_unmunges():
    lines = Lines()
    for i in range(peers.PEER_QUEUED):
        assert lines.put(item("uid 5678", b"%d" % i))[0]
    assert lines.put(item("uid 5678", b"one more")) == (False, None)
    assert lines.room("uid 5678") == 0 and lines.room("uid 1234") == peers.PEER_QUEUED
    for _ in range(peers.PEER_CHECKING):  # being checked, none done yet
        assert next_peer(lines) == "uid 5678"
    assert not lines.turns  # no fifth unmunge for that peer, though its lines wait
    lines.put(item("uid 1234", b"mine"))
    assert next_peer(lines) == "uid 1234"
    lines.done("uid 5678")
    assert next_peer(lines) == "uid 5678"


def test_a_full_queue_drops_the_fullest_peers_newest(monkeypatch):
    monkeypatch.setattr(peers, "MAX_QUEUED", 6)
    lines = Lines()
    for i in range(5):
        lines.put(item("uid 5678", b"flood %d" % i))
    lines.put(item("uid 1234", b"a"))
    queued, dropped = lines.put(item("uid 2468", b"b"))
    assert queued and dropped == ("uid 5678", None, b"flood 4")
    assert lines.put(item("uid 5678", b"flood 5")) == (False, None)


def test_a_peer_that_spent_its_time_waits_and_its_time_grows_back():
    budget = Budget()
    assert budget.spend("uid 1234", 0.01) == 0
    over = peers.USER_BURST + peers.USER_SHARE  # a second's worth past the burst
    wait = budget.spend("uid 5678", over)
    assert wait >= 1 and budget.spend("uid 1234", 0.0) == 0
    credit, when = budget.credit["uid 5678"]
    budget.credit["uid 5678"] = (credit, when - wait - 0.1)  # as if `wait` seconds went by
    assert budget.spend("uid 5678", 0.0) == 0


def hold(service, peer):
    a, b = socket.socketpair()
    a.setblocking(False)
    conn = _Conn(a, peer)
    service._hold(conn, _READ, b"")
    return conn, b


def test_a_full_reader_drops_the_oldest_of_the_peer_holding_the_most(service):
    service.capacity = 8
    mine = [hold(service, "uid 1234") for _ in range(2)]
    flood = [hold(service, "uid 5678") for _ in range(20)]
    assert len(service.conns) == 8
    assert all(c.sock in service.conns for c, _ in mine)  # never the one holding less
    kept = [c for c, _ in flood if c.sock in service.conns]
    assert kept == [c for c, _ in flood[-6:]]  # the flooder lost its oldest
    assert b"is busy" in flood[0][1].recv(4096)  # and was told so
    for _, other in mine + flood:
        other.close()


def test_a_full_reader_by_bytes_drops_the_fullest_peers_oldest(service, monkeypatch):
    monkeypatch.setattr(reader, "MAX_HELD_BYTES", 10_000)
    mine, _ = hold(service, "uid 1234")
    service._grow(mine, b"M" * 1000)
    big = [hold(service, "uid 5678") for _ in range(3)]
    for conn, _ in big:
        if conn.sock in service.conns:
            service._grow(conn, b"M" * 4000)
    assert mine.sock in service.conns and service.held_bytes <= 10_000
    assert big[0][0].sock not in service.conns


def test_a_reply_never_read_holds_no_worker_and_is_dropped_at_its_deadline(service):
    client, accepted, address = connect(service)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    accepted.setblocking(False)
    reply = {"ok": {"pad": "x" * (8 << 20)}}  # far more than both ends' buffers
    started = time.monotonic()
    service._reply(accepted, "uid 5678", reply)  # a worker's call: returns at once
    assert time.monotonic() - started < 1
    service._drain_wake()  # the reader takes the rest over, bounded like any connection
    (conn,) = service.conns.values()
    assert conn.phase == _WRITE and conn.peer == "uid 5678" and service.held_bytes > 0
    service._expire(time.monotonic() + reader.READ_TIMEOUT + 1)
    assert not service.conns and service.held_bytes == 0
    client.close()
