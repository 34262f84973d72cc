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

#: what each suite needs, as markers: `pytest -m "not root"` runs the quick part (unit tests,
#: and the store's against a real etcd) without loop devices, Slurm or namespaces
_NEEDS = {
    "unit": (),
    "store": ("etcd",),
    "system": ("etcd", "root"),
    "site": ("etcd", "root"),
    "security": ("etcd", "root", "slurm"),
    "e2e": ("etcd", "root", "slurm"),
    "slurm_suite": ("etcd", "root", "slurm"),
    "multihost": ("etcd", "root"),
}
_MARKERS = {
    "etcd": "talks to a real etcd (fetched by make test)",
    "root": "runs as root: loop devices, mounts, users, namespaces, dacd",
    "slurm": "may start a real Slurm (the host's 22.05, or a release's chroot)",
}


def pytest_configure(config):
    for name, what in _MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:  # tests/<suite>/..., under the checkout or the installed run's directory
            parts = item.path.relative_to(config.rootpath).parts
        except ValueError:
            parts = ()
        suite = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        needs = set(_NEEDS.get(suite, ("etcd", "root")))
        if "etcd_server" in getattr(item, "fixturenames", ()):  # a unit test reading records
            needs.add("etcd")
        for name in sorted(needs):
            item.add_marker(name)


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    # DAC_TEST_ETCD=3.5|3.6 runs the session on that etcd release (make test runs tests/store
    # on each; daclocal/etcd_releases.py fetches or builds it on first use)
    from daclocal.etcd_releases import etcd_binary

    binary = etcd_binary(os.environ.get("DAC_TEST_ETCD"))
    # Store tests use prefixes of their own (/test<pid>-<n>/, /c/...): admin may write them.
    # System tests that run dacd and the hooks here use /site<pid>-<n>/: every role may.
    server = EtcdServer(
        tmp_path_factory.mktemp("etcd"),
        extra_grants={
            "admin": [("readwrite", "/")],
            "dacd": [("readwrite", "/site")],
            "slurm": [("readwrite", "/site")],
        },
        binary=binary,
    ).start()
    yield server
    server.stop()


def client_of(
    server: EtcdServer,
    role: str | None = "admin",
    transport: str = "grpc",
    timeout: float = 3.0,
    endpoints: list[str] | None = None,
) -> EtcdClient:
    """A client of `server` with its TLS files, acting as `role` (None: no credential)."""
    s = server.settings()
    credential = Credential(f"{s['credentials_dir']}/{role}", role) if role else None
    return EtcdClient(
        endpoints or s["endpoints"],
        cacert=s["cacert"],
        cert=s["cert"],
        key=s["key"],
        timeout=timeout,
        transport=transport,
        credential=credential,
    )


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
