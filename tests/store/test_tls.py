"""etcd with TLS and client-certificate auth, configured the way etcdctl is (ETCDCTL_*)."""

import subprocess

import pytest

from daccore.config import load_config
from daccore.errors import StoreUnavailable
from daccore.etcd import TRANSPORTS
from daccore.store import Store
from daclocal.etcd_server import EtcdServer


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "1", "-subj", "/CN=dac test CA", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "node.pem", "-days", "1", "-extfile", "ext.cnf", cwd=d)
    files = (str(d / "ca.pem"), str(d / "node.pem"), str(d / "node.key"))
    server = EtcdServer(d / "etcd", tls=files).start()
    yield server, files
    server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_etcdctl_tls_variables_reach_a_client_cert_etcd(tls_etcd, tmp_path, transport):
    server, (cacert, cert, key) = tls_etcd
    bare = server.endpoint.removeprefix("https://")  # as etcdctl users write it
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(f"etcd: {{transport: {transport}, timeout: 2}}\n")
    env = {"ETCDCTL_ENDPOINTS": bare, "ETCDCTL_CACERT": cacert, "ETCDCTL_CERT": cert,
           "ETCDCTL_KEY": key}
    store = Store.from_settings(load_config(str(cfg), env=env).etcd)
    store.client.put("/tls/probe", "ok")
    assert store.client.get("/tls/probe").value == b"ok"
    # etcdctl itself, given the same variables, sees what dac wrote
    out = subprocess.run(["etcdctl", "get", "/tls/probe", "--print-value-only"],
                         env={**env, "ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "ok"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_client_certificate_is_refused_as_unreachable_in_bounded_time(tls_etcd, tmp_path,
                                                                          transport):
    server, (cacert, _, _) = tls_etcd
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(f"etcd: {{transport: {transport}, timeout: 1}}\n")
    env = {"ETCDCTL_ENDPOINTS": server.endpoint, "ETCDCTL_CACERT": cacert}
    store = Store.from_settings(load_config(str(cfg), env=env).etcd)
    with pytest.raises(StoreUnavailable, match="etcd unreachable at https://127.0.0.1"):
        store.client.get("/tls/probe")
