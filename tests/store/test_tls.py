"""etcd as dac requires it: https with client certificates and RBAC, configured the way
etcdctl is (ETCDCTL_*) plus the role credentials (etcd.credentials_dir)."""

import subprocess

import pytest

from daccore.errors import StoreUnavailable
from daccore.etcd.types import TRANSPORTS
from daccore.settings.config import load_config
from daccore.store import Store


def settings_env(server, cert=True):
    s = server.settings()
    bare = s["endpoints"][0].removeprefix("https://")  # as etcdctl users write it
    env = {"ETCDCTL_ENDPOINTS": bare, "ETCDCTL_CACERT": s["cacert"]}
    if cert:
        env.update(ETCDCTL_CERT=s["cert"], ETCDCTL_KEY=s["key"])
    return s, env


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_etcdctl_tls_variables_and_a_role_credential_reach_a_secure_etcd(
    etcd_server, tmp_path, transport
):
    s, env = settings_env(etcd_server)
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(
        f"etcd: {{transport: {transport}, timeout: 2, credentials_dir: {s['credentials_dir']}}}\n"
    )
    store = Store.from_settings(load_config(str(cfg), env=env).etcd, role="admin")
    assert store.client.endpoints == [etcd_server.endpoint]  # https added, as etcdctl does
    store.client.put("/dac/v1/tls-probe", "ok")
    probe = store.client.get("/dac/v1/tls-probe")
    assert probe is not None and probe.value == b"ok"
    # etcdctl itself, given the same variables and the admin user, sees what dac wrote
    user = open(f"{s['credentials_dir']}/admin").read().strip()
    out = subprocess.run(
        ["etcdctl", "get", "/dac/v1/tls-probe", "--print-value-only"],
        env={**env, "ETCDCTL_API": "3", "ETCDCTL_USER": user, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "ok"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_client_certificate_is_refused_as_unreachable_in_bounded_time(
    etcd_server, tmp_path, transport
):
    s, env = settings_env(etcd_server, cert=False)  # the CA and a valid credential, no cert
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(
        f"etcd: {{transport: {transport}, timeout: 1, credentials_dir: {s['credentials_dir']}}}\n"
    )
    store = Store.from_settings(load_config(str(cfg), env=env).etcd, role="admin")
    with pytest.raises(StoreUnavailable, match="etcd unreachable at https://127.0.0.1"):
        store.client.get("/dac/v1/tls-probe")
