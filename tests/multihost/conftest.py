"""One multi-host site per module (tests/multihost_site.py): booting it (namespaces, five
sshds, etcd, two dacds) takes seconds, so the tests of a file share it, each leaving it as it
found it (every buffer torn down, every link up)."""

import os

import pytest
from multihost_site import booted


@pytest.fixture(scope="session", autouse=True)
def needs_root():
    # namespaces, bridges and sshd need root; a run without it must fail loudly, not skip
    assert os.geteuid() == 0, "multi-host tests need root (namespaces, sshd): run as root"


@pytest.fixture(scope="module")
def mh():
    """The booted site: (site, the controller's env for dacctl, a Store as admin)."""
    with booted() as (site, env, store):
        yield site, env, store
