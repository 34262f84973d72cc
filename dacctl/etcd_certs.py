"""`dacctl etcd-certs DIR --member NAME=ADDRESS[,NAME-OR-ADDRESS…] …`: a site's etcd
certificates (docs/admin.md, "etcd certificates"), as docs/security.md asks for them:

    ca.pem, ca.key                  the site's etcd CA (the key stays on the admin host)
    member-<name>.pem, .key         each member's certificate, naming every address and name
                                    it is dialled by (clients and peers check them), for
                                    server and client use (peers and etcd's own gateway dial
                                    with it); no Common Name either
    client-<role>.pem, .key         one client certificate per role (dacd, slurm, admin),
                                    without a Common Name: etcd's JSON gateway refuses one that
                                    has one, and over gRPC a CN would log in as that etcd user

Keys are written 0600, certificates 0644, each through a new file descriptor that follows no
link; an existing CA key is never replaced (every certificate made from it would be orphaned)
unless --force.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from daccore.errors import AdminError, UserError

TYPE_CHECKING = False  # typing's own, without importing typing on a command's path; mypy: True
if TYPE_CHECKING:
    from collections.abc import Callable

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    #: writes a key and its certificate as NAME.key and NAME.pem
    _Save = Callable[[str, ec.EllipticCurvePrivateKey, x509.Certificate], None]

__all__ = ["ROLES", "parse_member", "make_site_certs"]

ROLES = ("dacd", "slurm", "admin")
YEARS = 5


def parse_member(text: str) -> tuple[str, list[str]]:
    """`etcd1=10.0.0.1,etcd1.example.org` -> ("etcd1", ["10.0.0.1", "etcd1.example.org"])."""
    name, _, rest = text.partition("=")
    where = [w for w in rest.split(",") if w]
    if not name or not where or not all(c.isalnum() or c in "-_." for c in name):
        raise UserError(
            f"--member '{text}': give NAME=ADDRESS[,NAME-OR-ADDRESS...], e.g. "
            "etcd1=10.0.0.1,etcd1.example.org"
        )
    return name, where


def _san(name: str, where: list[str]) -> x509.SubjectAlternativeName:
    from cryptography import x509

    out: list[x509.GeneralName] = []
    for item in dict.fromkeys([name, *where]):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(item)))
        except ValueError:
            out.append(x509.DNSName(item))
    return x509.SubjectAlternativeName(out)


def make_site_certs(
    directory: Path, members: dict[str, list[str]], force: bool = False
) -> list[str]:
    """Write the CA, one certificate per member and one client certificate per role into
    `directory`; the paths written."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    if not members:
        raise UserError("give every etcd member with --member NAME=ADDRESS[,...]")
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    dir_fd = _own_directory(directory)
    if _exists(dir_fd, "ca.key") and not force:
        os.close(dir_fd)
        raise AdminError(
            f"{directory}/ca.key exists: its certificates are in use; pass --force "
            "to make a new CA (every member and client then needs the new files)"
        )
    now = datetime.datetime.now(datetime.timezone.utc)
    until = now + datetime.timedelta(days=365 * YEARS)
    written: list[str] = []

    def write(name: str, data: bytes, mode: int) -> None:
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode, dir_fd=dir_fd
        )
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        written.append(str(directory / name))

    def save(name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM), 0o644)
        write(
            f"{name}.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            0o600,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dac etcd CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    try:
        save("ca", ca_key, ca)
        _leaves(save, ca_key, ca_name, now, until, members)
    finally:
        os.close(dir_fd)
    return written


def _leaves(
    save: _Save,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    now: datetime.datetime,
    until: datetime.datetime,
    members: dict[str, list[str]],
) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def leaf(
        name: str,
        subject: list[x509.NameAttribute[str]],
        usages: list[x509.ObjectIdentifier],
        san: x509.SubjectAlternativeName | None = None,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if san is not None:
            b = b.add_extension(san, critical=False)
        save(name, key, b.sign(ca_key, hashes.SHA256()))

    org = x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dac")
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    for name, where in members.items():
        # no CN either: etcd's gateway dials etcd with it, and a CN would be an etcd login
        leaf(
            f"member-{name}",
            [org, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, name)],
            both,
            _san(name, where),
        )
    for role in ROLES:  # no CN (module docstring); the unit says whose it is
        leaf(
            f"client-{role}",
            [org, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role)],
            [ExtendedKeyUsageOID.CLIENT_AUTH],
        )


def _own_directory(directory: Path) -> int:
    """An fd of `directory`, which must be a real directory of the caller's that no one else
    can write: the files are written through it, so no name a user could change is resolved
    (docs/security.md, rule 1)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise AdminError(f"{directory}: {e.strerror} (a link, or not a directory)") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise AdminError(
            f"{directory}: must be yours and writable by you alone (it holds the etcd CA's key)"
        )
    return fd


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
