"""Shared fixtures: a real etcd per test session, on free loopback ports, always stopped.

The session's etcd runs as the local DAC's does and as a site's must (docs/security.md): https
with client certificates, and RBAC with the dacd, slurm and admin roles, so every test that
talks to etcd does so authenticated. The store tests act as `admin`, which here may also write
the per-test prefixes they use; the roles' limits are tested under the real prefix.

There are no skips: `make test` installs etcd, so a missing etcd is a failure everywhere
(and must be in CI, where CI=true).
"""

import itertools
import os

import pytest

from daccore.etcd.auth import Credential
from daccore.etcd.client import EtcdClient
from daccore.store import Store
from daclocal.etcd_server import EtcdServer

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    # Store tests use prefixes of their own (/test<pid>-<n>/, /c/...): admin may write them.
    # System tests that run dacd and the hooks here use /site<pid>-<n>/: every role may.
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), extra_grants={
        "admin": [("readwrite", "/")], "dacd": [("readwrite", "/site")],
        "slurm": [("readwrite", "/site")]}).start()
    yield server
    server.stop()


def client_of(server: EtcdServer, role: str | None = "admin", transport: str = "grpc",
              timeout: float = 3.0, endpoints: list[str] | None = None) -> EtcdClient:
    """A client of `server` with its TLS files, acting as `role` (None: no credential)."""
    s = server.settings()
    credential = Credential(f"{s['credentials_dir']}/{role}", role) if role else None
    return EtcdClient(endpoints or s["endpoints"], cacert=s["cacert"], cert=s["cert"],
                      key=s["key"], timeout=timeout, transport=transport, credential=credential)


@pytest.fixture
def etcd_client():
    """`client_of`, for tests that need a client other than the `etcd` fixture's."""
    made = []

    def make(*args, **kw):
        made.append(client_of(*args, **kw))
        return made[-1]
    yield make
    for c in made:
        c.close()


@pytest.fixture(params=["grpc", "http"])
def etcd(etcd_server, request):
    """A client of the session's etcd, once per transport: both must behave the same."""
    client = client_of(etcd_server, transport=request.param)
    client.delete("/c/", "/c0")  # client tests use fixed keys under /c/
    yield client
    client.close()


@pytest.fixture
def store(etcd):
    """A Store under a prefix of its own, so tests never see each other's keys."""
    return Store(etcd, f"/test{os.getpid()}-{next(_prefixes)}/")
