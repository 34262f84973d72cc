"""One multi-host site per module (tests/multihost_site.py): booting it (namespaces, five
sshds, etcd, two dacds) takes seconds, so the tests of a file share it, each leaving it as it
found it (every buffer torn down, every link up)."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from clitools import pools, wait_for
from multihost_site import Site

from daccore.config import load_config
from daccore.store import Store
from daclocal.etcd_server import EtcdServer


@pytest.fixture(scope="session", autouse=True)
def needs_root():
    # namespaces, bridges and sshd need root; a run without it must fail loudly, not skip
    assert os.geteuid() == 0, "multi-host tests need root (namespaces, sshd): run as root"


@pytest.fixture(scope="module")
def mh():
    """The booted site: (site, the controller's env for dacctl, a Store as admin)."""
    root = Path(tempfile.mkdtemp(prefix="dacmh-"))
    root.chmod(0o755)  # the job's user reaches its mounts below it, as below a site's /mnt
    site = Site(root, nodes=3)  # a requeued job runs on another node set
    try:
        site.boot()
        site.etcd = EtcdServer(root / "etcd", address=site.controller).start()
        config = site.config(site.etcd.settings())
        for server in site.servers:  # each server its own config file, as on a site
            site.start_dacd(server, site.write_config(server.name, config))
        path = site.write_config("controller", config)
        env = {"DAC_CONFIG": str(path), "DAC_ETCD_ENDPOINTS": ""}
        wait_for(lambda: pools(env).get("p", {}).get("total_bricks") == len(site.servers), 60,
                 "every server's dacd registered")
        yield site, env, Store.from_settings(load_config(str(path), env={}).etcd)
    finally:
        site.destroy()
        shutil.rmtree(root, ignore_errors=True)
