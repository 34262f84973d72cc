"""Shared fixtures: a real etcd per test session, on free loopback ports, always stopped.

There are no skips: `make test` installs etcd, so a missing etcd is a failure everywhere
(and must be in CI, where CI=true).
"""

import itertools
import os

import pytest

from daccore.etcd import EtcdClient
from daccore.store import Store
from daclocal.etcd_server import EtcdServer

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture(params=["grpc", "http"])
def etcd(etcd_server, request):
    """A client of the session's etcd, once per transport: both must behave the same."""
    client = EtcdClient([etcd_server.endpoint], timeout=3.0, transport=request.param)
    client.delete("/c/", "/c0")  # client tests use fixed keys under /c/
    yield client
    client.close()


@pytest.fixture
def store(etcd):
    """A Store under a prefix of its own, so tests never see each other's keys."""
    return Store(etcd, f"/test{os.getpid()}-{next(_prefixes)}/")
