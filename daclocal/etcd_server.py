"""A single-node etcd on free loopback ports, for the local DAC and the store tests; secure
(TLS with client certificates, and RBAC) unless told otherwise (daclocal.etcd_secure)."""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.request
from pathlib import Path

from daccore.errors import AdminError
from daclocal.procs import free_port, is_running, spawn, stop_pid

__all__ = ["find_etcd", "EtcdServer", "PREFIX"]

#: the key prefix the roles are granted on (etcd.prefix's default)
PREFIX = "/dac/v1/"


def find_etcd() -> str:
    path = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/local/bin")
    if not path:
        raise AdminError("etcd is not installed: run `make deps` (installs Debian's etcd-server)")
    return path


class EtcdServer:
    """One etcd process with its data in `workdir`. Fast election flags: healthy in ~0.1 s."""

    def __init__(self, workdir: Path, client_port: int = 0, peer_port: int = 0,
                 pid: int = 0, tls: tuple[str, str, str] | None = None, secure: bool = True,
                 owners: dict[str, tuple[int, int]] | None = None,
                 extra_grants: dict[str, list[tuple[str, str]]] | None = None,
                 flags: tuple[str, ...] = (), binary: str | None = None):
        """`tls` = (cacert, cert, key): serve https and require client certificates signed by
        the CA; the same cert and key serve as the health check's client identity. Without
        `tls`, `secure` makes a CA and certificates in `workdir/pki`, serves https with client
        certificates, and turns RBAC on with the three roles' credentials in
        `workdir/credentials` (`owners`: role -> (uid, gid) of its file; `extra_grants`: role ->
        more (permission, key prefix), for tests that use prefixes of their own)."""
        self.workdir = Path(workdir)
        self.client_port, self.peer_port, self.pid = client_port, peer_port, pid
        self.secure = secure and tls is None
        self.owners, self.extra_grants = owners, extra_grants or {}
        self.flags = list(flags)  # more etcd flags, e.g. a short --auth-token-ttl for tests
        self.binary = binary  # another release's etcd (daclocal.etcd_releases); else the host's
        self.tls = tls
        if self.secure:
            self.tls = (str(self.pki_dir / "ca.pem"), str(self.pki_dir / "server.pem"),
                        str(self.pki_dir / "server.key"))

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def credentials_dir(self) -> Path:
        return self.workdir / "credentials"

    def settings(self) -> dict:
        """The `etcd` section of a dac config that reaches this server."""
        etcd: dict = {"endpoints": [self.endpoint]}
        if self.secure:
            pki = self.pki_dir
            etcd.update(cacert=str(pki / "ca.pem"), cert=str(pki / "client.pem"),
                        key=str(pki / "client.key"), credentials_dir=str(self.credentials_dir))
        elif self.tls:
            etcd.update(cacert=self.tls[0], cert=self.tls[1], key=self.tls[2])
        return etcd

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    @property
    def log(self) -> Path:
        return self.workdir / "etcd.log"

    def start(self, timeout: float = 15.0) -> EtcdServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.secure:
            from daclocal.etcd_secure import make_pki
            make_pki(self.pki_dir)
        for _ in range(5):  # a free port can be taken between probing and binding
            self.client_port, self.peer_port = free_port(), free_port()
            # the peer port too: raft messages from anyone who can connect would be trusted
            scheme = "https" if self.secure else "http"
            client, peer = self.endpoint, f"{scheme}://127.0.0.1:{self.peer_port}"
            proc = spawn([self.binary or find_etcd(), "--name", "dac-local",
                          "--data-dir", str(self.workdir / "etcd-data"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", f"dac-local={peer}",
                          "--heartbeat-interval", "10", "--election-timeout", "100",
                          "--log-level", "warn", *self._tls_flags(), *self.flags], self.log)
            self.pid = proc.pid
            if self._wait_healthy(proc, timeout):
                if self.secure:
                    self._enable_rbac()
                return self
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no log)"]
        raise AdminError(f"etcd did not start in {timeout:.0f}s: {tail[0]} (log: {self.log})")

    def _enable_rbac(self) -> None:
        from daclocal.etcd_secure import Pki, enable_rbac
        pki = self.pki_dir
        enable_rbac(self.endpoint, Pki(*(str(pki / f) for f in (
            "ca.pem", "server.pem", "server.key", "client.pem", "client.key"))),
            self.credentials_dir, PREFIX, self.owners, self.extra_grants)

    def _tls_flags(self) -> list[str]:
        if not self.tls:
            return []
        cacert, cert, key = self.tls
        peer = ["--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file",
                cacert, "--peer-client-cert-auth"] if self.secure else []
        return ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", cacert,
                "--client-cert-auth", *peer]

    def _wait_healthy(self, proc, timeout: float) -> bool:
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=self.tls[0])
            context.load_cert_chain(self.tls[1], self.tls[2])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=0.5,
                                            context=context) as r:
                    if json.load(r).get("health") == "true":
                        return True
            except OSError:
                pass
            time.sleep(0.03)
        stop_pid(proc.pid, "etcd")
        return False

    def running(self) -> bool:
        return bool(self.pid) and is_running(self.pid, str(self.workdir))

    def stop(self) -> None:
        if self.pid:
            stop_pid(self.pid, str(self.workdir))
        self.pid = 0
