"""etcd's RBAC as dac uses it: each role may write what its code writes and no more; a request
without a token is refused; a token etcd has forgotten is renewed, under leases and watches
too; the hooks' token cache is reused, and refused when others could have read it."""

import json
import os
import threading
import time

import pytest
from conftest import client_of
from records import buffer_maker, host, pool

from daccore.errors import NoCredential
from daccore.etcd.auth import Credential
from daccore.etcd.types import TRANSPORTS, EtcdRequestError
from daccore.records.models import State, Status
from daccore.services.buffers import allocate_buffer
from daccore.store import Store
from daclocal.etcd_server import PREFIX, EtcdServer

pytestmark = pytest.mark.parametrize("transport", TRANSPORTS)


@pytest.fixture
def roles(etcd_server, transport):
    """A Store per role on the real prefix, with names of this test's own."""
    tag = f"auth{os.getpid()}{transport}"
    clients = {r: client_of(etcd_server, r, transport) for r in ("dacd", "slurm", "admin")}
    yield {r: Store(c, PREFIX) for r, c in clients.items()}, tag
    for c in clients.values():
        c.close()


def test_each_role_does_its_part_of_a_buffers_life_and_no_more(roles):
    stores, tag = roles
    dacd, slurm, admin = stores["dacd"], stores["slurm"], stores["admin"]
    pool_name, h = f"{tag}p", f"{tag}h1"
    dacd.ensure_pool(pool(pool_name))
    dacd.register_host(host(h, 2, pool_name=pool_name))
    keeper = dacd.keep_alive(h, 5)
    try:
        # the scheduler side places and claims: a txn whose compares read keys it only reads
        buf, rev = allocate_buffer(
            slurm, buffer_maker(f"{tag}b", 100, pool_name), capacity=100, pool=pool_name
        )
        dacd.put_status(Status(buffer=buf.name, host=h, state=State.CREATED))
        admin.set_drained(h, True)  # hosts/ and capacity/: an admin's write
        for denied in (
            lambda: slurm.register_host(host(h, 2, pool_name=pool_name)),
            lambda: slurm.put_status(Status(buffer=buf.name, host=h, state=State.DELETED)),
            lambda: slurm.ensure_pool(pool(f"{tag}q")),
            lambda: slurm.client.put(PREFIX + f"alive/{tag}fake", ""),
            lambda: dacd.client.put(PREFIX + f"elsewhere/{tag}", "x"),
            lambda: dacd.client.put(f"/not-dac/{tag}", "x"),
        ):
            with pytest.raises(EtcdRequestError, match="permission denied"):
                denied()
        # the primary host's dacd reaps the torn-down buffer: claims, statuses and spec
        dacd.delete_buffer(buf.name, rev)
        assert slurm.buffer(buf.name) is None
        assert buf.name not in slurm.claims().values()
    finally:
        keeper.stop()
        admin.client.delete(PREFIX + f"hosts/{h}")
        admin.client.delete(PREFIX + f"capacity/{h}")
        admin.client.delete(PREFIX + f"pools/{pool_name}")


def test_no_credential_is_refused(etcd_server, transport):
    client = client_of(etcd_server, None, transport)
    try:
        # the gateway: no user at all; gRPC: the CN-less certificate names no one
        with pytest.raises(EtcdRequestError, match="user name is empty|permission denied"):
            client.get(PREFIX + "buffers/x")
        with pytest.raises(EtcdRequestError, match="user name is empty|permission denied"):
            client.put(PREFIX + "buffers/x", "{}")
    finally:
        client.close()


def test_an_unreadable_credential_is_one_line_naming_the_file_and_who_acts(
    etcd_server, transport, tmp_path
):
    client = client_of(etcd_server, None, transport)
    client.credential = Credential(str(tmp_path / "nope" / "slurm"), "slurm")
    try:
        with pytest.raises(NoCredential) as e:
            client.get(PREFIX + "buffers/x")
        msg = str(e.value)
        assert str(tmp_path / "nope" / "slurm") in msg and "SlurmUser" in msg
        assert "\n" not in msg
    finally:
        client.close()


@pytest.fixture(scope="module")
def short_tokens(tmp_path_factory):
    """etcd forgets a token unused for 1 s: renewal happens, for real, within a test."""
    server = EtcdServer(
        tmp_path_factory.mktemp("etcd-ttl"),
        extra_grants={"admin": [("readwrite", "/")]},
        flags=("--auth-token-ttl", "1"),
    ).start()
    yield server
    server.stop()


def test_an_expired_token_is_renewed_for_requests_leases_and_watches(short_tokens, transport):
    client = client_of(short_tokens, "admin", transport)
    try:
        lease = client.lease_grant(30)
        client.put("/r/leased", "v", lease=lease)
        assert client.credential is not None
        token = client.credential._tokens[short_tokens.endpoint]
        events, seen = [], threading.Event()
        w = client.watch("/r/w/", "/r/w0")

        def follow():
            for ev in w:
                events.append(ev.kv.value)
                seen.set()

        threading.Thread(target=follow, daemon=True).start()
        time.sleep(2.5)  # the token expires in etcd
        leased = client.get("/r/leased")
        assert leased is not None and leased.value == b"v"
        renewed = client.credential._tokens[short_tokens.endpoint]
        assert renewed != token
        assert client.lease_keepalive(lease) > 0
        time.sleep(2.5)
        w.interrupt()  # the watch reconnects with a token etcd forgot meanwhile
        time.sleep(0.3)
        client.put("/r/w/1", "after")
        assert seen.wait(5) and events == [b"after"]
        w.close()
    finally:
        client.close()


def test_the_hooks_token_cache_is_reused_renewed_and_refused_if_exposed(
    short_tokens, transport, tmp_path, monkeypatch
):
    monkeypatch.setenv("DAC_CACHE_DIR", str(tmp_path / "cache"))
    s = short_tokens.settings()

    def hook_client():  # one per process, as each Slurm hook is
        c = client_of(short_tokens, None, transport)
        c.credential = Credential(f"{s['credentials_dir']}/slurm", "slurm", cache=True)
        return c

    first = hook_client()
    first.get(PREFIX + "buffers/x")
    (cache,) = (tmp_path / "cache").iterdir()
    assert cache.stat().st_mode & 0o777 == 0o600
    token = json.loads(cache.read_text())["tokens"][short_tokens.endpoint]
    second = hook_client()
    second.get(PREFIX + "buffers/x")  # no authenticate: the cached token
    assert second.credential._tokens[short_tokens.endpoint] == token
    time.sleep(2.5)
    third = hook_client()
    third.get(PREFIX + "buffers/x")  # cached token refused by etcd: renewed, cache rewritten
    renewed = json.loads(cache.read_text())["tokens"][short_tokens.endpoint]
    assert renewed != token and third.credential._tokens[short_tokens.endpoint] == renewed
    cache.chmod(0o644)  # others could have read it: not used, replaced by a private one
    fourth = hook_client()
    fourth.get(PREFIX + "buffers/x")
    assert fourth.credential._tokens[short_tokens.endpoint] != renewed
    assert cache.stat().st_mode & 0o777 == 0o600
    for c in (first, second, third, fourth):
        c.close()


def test_the_scheduler_side_claims_a_big_buffer_in_chunks_and_dacd_reaps_it(roles):
    """Intents and their lease keys (a buffer over one transaction's worth of bricks): the
    slurm role writes them, dacd rolls back a dead one at start and reaps the buffer."""
    stores, tag = roles
    dacd, slurm = stores["dacd"], stores["slurm"]
    pool_name = f"{tag}big"
    dacd.ensure_pool(pool(pool_name))
    keepers = []
    for i in range(10):
        dacd.register_host(host(f"{tag}big{i}", 20, pool_name=pool_name))
        keepers.append(dacd.keep_alive(f"{tag}big{i}", 5))
    try:
        buf, rev = allocate_buffer(
            slurm,
            buffer_maker(f"{tag}huge", 200 * 100, pool_name),
            capacity=200 * 100,
            pool=pool_name,
        )
        assert len(buf.allocation.bricks) == 200
        assert dacd.recover_intents() == []
        dacd.delete_buffer(buf.name, rev)
        assert slurm.buffer(buf.name) is None
    finally:
        for k in keepers:
            k.stop()
        admin = stores["admin"]
        for i in range(10):
            admin.client.delete(PREFIX + f"hosts/{tag}big{i}")
            admin.client.delete(PREFIX + f"capacity/{tag}big{i}")
        admin.client.delete(PREFIX + f"pools/{pool_name}")
