"""TLS and RBAC for the local DAC's etcd, set up the way docs/security.md tells a site to.

The certificates come from the `cryptography` package, already installed as a dependency of
ansible-core (no openssl process per file). One CA; a server certificate for 127.0.0.1; one
client certificate with no Common Name: etcd's JSON gateway refuses a client certificate that
has one (since CVE-2018-16886), and over gRPC a CN would log in as that etcd user without a
password. The client certificate is a gate, not an identity: with `--client-cert-auth`, only a
holder of its key can open a connection to etcd at all; who it then is comes from the role's
user name and password (daccore.etcd.auth).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import subprocess
from pathlib import Path
from typing import NamedTuple

from daccore.errors import AdminError
from daccore.etcd.auth import ROLES

__all__ = ["Pki", "make_pki", "grants", "enable_rbac", "etcdctl_env"]


class Pki(NamedTuple):
    cacert: str
    cert: str  # the server's
    key: str
    client_cert: str
    client_key: str


def make_pki(
    directory: Path,
    addresses: tuple[str, ...] = ("127.0.0.1",),
    names: tuple[str, ...] = ("localhost",),
) -> Pki:
    """A CA, a server certificate for `addresses` and `names` (every address etcd listens on
    and every name clients dial it by: the TLS check compares them) and a CN-less client
    certificate. Keys are 0600 (root reads them here: etcd, dacd and the Slurm hooks all run
    as root); the CA certificate is public."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    days = datetime.timedelta(days=3650)

    def write(name: str, data: bytes, mode: int) -> str:
        path = directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        return str(path)

    def save(name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[str, str]:
        return (
            write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644),
            write(
                f"{name}.key",
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
                0o600,
            ),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dac local etcd CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cacert, _ = save("ca", ca_key, ca)

    def leaf(name: str, usages: list[x509.ObjectIdentifier], san: bool) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dac")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + days)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if san:
            b = b.add_extension(
                x509.SubjectAlternativeName(
                    [
                        *(
                            x509.IPAddress(ipaddress.ip_address(a))
                            for a in dict.fromkeys(addresses)
                        ),
                        *(x509.DNSName(n) for n in dict.fromkeys(names)),
                    ]
                ),
                critical=False,
            )
        return save(name, key, b.sign(ca_key, hashes.SHA256()))

    # etcd's gateway dials etcd's own gRPC port with the server certificate: it needs both uses
    cert, key = leaf(
        "server", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], san=True
    )
    client_cert, client_key = leaf("client", [ExtendedKeyUsageOID.CLIENT_AUTH], san=False)
    return Pki(cacert, cert, key, client_cert, client_key)


def grants(prefix: str) -> dict[str, list[tuple[str, str]]]:
    """Role -> (permission, key prefix): what each role's code writes, and reads, and no more.

    - dacd writes pools/, hosts/ with capacity/, alive/ and status/; the primary host's dacd
      also reaps a torn-down buffer (Store.delete_buffer: its claims, MGS slot, statuses, work
      keys and spec in one transaction), and etcd has no delete-only permission, so it writes
      buffers/, claims/, mgs/ and work/ too (it also drops its host's stray work keys); and it
      rolls back a big allocation cut short (intents/, intent-leases/: Store.recover_intents)
      when it starts; and records what a compute node dead at a teardown still owes, and
      drops it once done (owed/: dacd/owed.py); runs the stages jobs ask for while they run
      (stage-status/), and drops them with their index once the job's buffer is gone
      (stages/, stage-index/: dacd/staging/injob.py); plans a stage split across a buffer's
      servers, and says which mount namespace it sees filesystems in (stageplans/,
      stage-views/: daccore/store/stageplans.py).
    - slurm (the Slurm hooks, the user service) writes buffers/, claims/ and mgs/ (the
      allocation transaction), work/ (with every write of a spec), intents/ and intent-leases/
      (a big buffer's chunked claim), owner-locks/ (one persistent buffer of an owner made at
      a time, its caps kept), stages/ and stage-index/ (the stages a running job asks for,
      through the user service: daccore.services.injob) and reads the rest: placement reads
      the whole inventory.
    - admin (root on admin hosts) writes all of the prefix: drain (hosts/, capacity/), forget.
    Reading covers txn compares, which etcd checks as reads.
    """
    p = prefix
    dacd_writes = [
        "pools/",
        "hosts/",
        "capacity/",
        "alive/",
        "status/",
        "buffers/",
        "claims/",
        "mgs/",
        "intents/",
        "intent-leases/",
        "work/",
        "owed/",
        "stages/",
        "stage-status/",
        "stage-index/",
        "stageplans/",
        "stage-views/",
    ]
    slurm_writes = [
        "buffers/",
        "claims/",
        "mgs/",
        "intents/",
        "intent-leases/",
        "work/",
        "owner-locks/",
        "stages/",
        "stage-index/",
    ]
    return {
        "dacd": [("read", p)] + [("readwrite", p + k) for k in dacd_writes],
        "slurm": [("read", p)] + [("readwrite", p + k) for k in slurm_writes],
        "admin": [("readwrite", p)],
    }


def etcdctl_env(endpoint: str, pki: Pki) -> dict[str, str]:
    return {
        "ETCDCTL_API": "3",
        "ETCDCTL_ENDPOINTS": endpoint,
        "ETCDCTL_CACERT": pki.cacert,
        "ETCDCTL_CERT": pki.client_cert,
        "ETCDCTL_KEY": pki.client_key,
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }


def enable_rbac(
    endpoint: str,
    pki: Pki,
    credentials_dir: Path,
    prefix: str,
    owners: dict[str, tuple[int, int]] | None = None,
    extra_grants: dict[str, list[tuple[str, str]]] | None = None,
) -> None:
    """Create root and the three role users with random passwords, grant each role its
    prefixes, turn authentication on, and write `<credentials_dir>/<role>` (0600, owned by
    `owners[role]`, root by default) plus `root` for etcdctl."""
    env = etcdctl_env(endpoint, pki)

    def etcdctl(*args: str) -> None:
        r = subprocess.run(["etcdctl", *args], env=env, capture_output=True, text=True)
        if r.returncode:
            raise AdminError(
                f"etcdctl {args[0]} {args[1]} failed: "
                f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}"
            )

    credentials_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    passwords = {name: secrets.token_urlsafe(24) for name in ("root", *ROLES)}
    etcdctl("user", "add", f"root:{passwords['root']}")
    etcdctl("user", "grant-role", "root", "root")
    for role, perms in grants(prefix).items():
        etcdctl("user", "add", f"{role}:{passwords[role]}")
        etcdctl("role", "add", role)
        for perm, key in perms + (extra_grants or {}).get(role, []):
            etcdctl("role", "grant-permission", role, "--prefix=true", perm, key)
        etcdctl("user", "grant-role", role, role)
    etcdctl("auth", "enable")
    for name, password in passwords.items():
        path = credentials_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{name}:{password}\n")
        uid, gid = (owners or {}).get(name, (0, 0))
        os.chown(path, uid, gid)
        os.chmod(path, 0o600)
