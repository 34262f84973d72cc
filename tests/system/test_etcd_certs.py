"""`dacctl etcd-certs`, the site's etcd certificates (docs/admin.md, "etcd certificates"):
a real etcd serves with a member's certificate, requires client certificates, and takes each
role's; one from another CA is refused; the member certificate names every address and name
given; no certificate has a Common Name; keys are 0600."""

import os
import stat

import pytest
from clitools import run
from cryptography import x509
from cryptography.x509.oid import NameOID

from daccore.errors import StoreUnavailable
from daccore.etcd.client import EtcdClient
from daclocal.etcd_server import EtcdServer


@pytest.fixture
def certs(tmp_path):
    d = tmp_path / "etcd-pki"
    out = run(
        "dacctl",
        "etcd-certs",
        str(d),
        "--member",
        "etcd1=127.0.0.1,localhost",
        "--member",
        "etcd2=10.0.0.2,etcd2.example.org",
    ).stdout
    assert f"{d}/member-etcd2.pem: written" in out
    return d


def test_etcd_certs_name_every_members_addresses_and_no_common_name(certs):
    names = sorted(p.name for p in certs.iterdir())
    assert names == sorted(
        ["ca.pem", "ca.key"]
        + [
            f"{k}-{n}.{e}"
            for k, n in [
                ("member", "etcd1"),
                ("member", "etcd2"),
                ("client", "dacd"),
                ("client", "slurm"),
                ("client", "admin"),
            ]
            for e in ("pem", "key")
        ]
    )
    for p in certs.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == (0o600 if p.suffix == ".key" else 0o644), p
    member = x509.load_pem_x509_certificate((certs / "member-etcd2.pem").read_bytes())
    san = member.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.2"]
    assert san.get_values_for_type(x509.DNSName) == ["etcd2", "etcd2.example.org"]
    for p in certs.glob("*-*.pem"):
        cert = x509.load_pem_x509_certificate(p.read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME) == [], p


def test_etcd_certs_never_replace_a_ca_in_use_and_refuse_a_directory_others_can_write(
    certs, tmp_path
):
    ca = (certs / "ca.key").read_bytes()
    r = run("dacctl", "etcd-certs", str(certs), "--member", "etcd1=127.0.0.1", check=False)
    assert r.returncode == 2 and "ca.key exists" in r.stderr and len(r.stderr.splitlines()) == 1
    assert (certs / "ca.key").read_bytes() == ca
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    r = run("dacctl", "etcd-certs", str(open_dir), "--member", "etcd1=127.0.0.1", check=False)
    assert r.returncode == 2 and "writable by you alone" in r.stderr
    assert list(open_dir.iterdir()) == []


def test_a_real_etcd_serves_with_the_member_cert_and_takes_each_roles_client_cert(certs, tmp_path):
    server = EtcdServer(
        tmp_path / "etcd",
        secure=False,
        tls=(
            str(certs / "ca.pem"),
            str(certs / "member-etcd1.pem"),
            str(certs / "member-etcd1.key"),
        ),
    ).start()
    try:
        for role in ("dacd", "slurm", "admin"):
            client = EtcdClient(
                [server.endpoint],
                cacert=str(certs / "ca.pem"),
                cert=str(certs / f"client-{role}.pem"),
                key=str(certs / f"client-{role}.key"),
                timeout=5,
            )
            client.put(f"/t/{role}", b"1")
            assert client.get(f"/t/{role}") is not None
            client.close()
        other = tmp_path / "other"
        run("dacctl", "etcd-certs", str(other), "--member", "x=127.0.0.1")
        stranger = EtcdClient(
            [server.endpoint],
            cacert=str(certs / "ca.pem"),
            cert=str(other / "client-admin.pem"),
            key=str(other / "client-admin.key"),
            timeout=2,
        )
        with pytest.raises(StoreUnavailable):
            stranger.put("/t/stranger", b"1")
        stranger.close()
    finally:
        server.stop()
