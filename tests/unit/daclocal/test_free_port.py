"""daclocal.procs.free_port: `dacctl local up` picks every daemon's port before any of them
listens, so two picks in one process must never be the same port (seen: two dacds given one
metrics port, and the second refused to start)."""

import socket

from daclocal.procs import free_port


def test_free_port_never_hands_out_a_port_twice_in_one_process():
    ports = [free_port() for _ in range(3000)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:  # and each was free: one of them binds
        s.bind(("127.0.0.1", ports[-1]))
