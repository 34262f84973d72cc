"""etcd on free loopback ports, for the local DAC and the store tests: one member
(`EtcdServer`) or several (`EtcdCluster`, `dacctl local up --etcd-members 3`); secure (TLS with
client certificates on the client and peer ports, and RBAC) unless told otherwise
(daclocal.etcd_secure)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from daccore.errors import AdminError
from daclocal.procs import free_port, is_running, spawn, stop_pid

__all__ = ["find_etcd", "EtcdServer", "EtcdCluster", "PREFIX"]

#: the key prefix the roles are granted on (etcd.prefix's default)
PREFIX = "/dac/v1/"

#: the `etcd` section of a dac config, as written to dac.yaml: endpoints (a list) and the TLS
#: and credential paths (str); callers index it and add keys of their own (timeout)
EtcdSettings = dict[str, Any]


def find_etcd() -> str:
    path = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/local/bin")
    if not path:
        raise AdminError("etcd is not installed: run `make deps` (installs Debian's etcd-server)")
    return path


class EtcdServer:
    """One etcd process with its data in `workdir`. Fast election flags: healthy in ~0.1 s."""

    def __init__(
        self,
        workdir: Path,
        client_port: int = 0,
        peer_port: int = 0,
        pid: int = 0,
        tls: tuple[str, str, str] | None = None,
        secure: bool = True,
        owners: dict[str, tuple[int, int]] | None = None,
        extra_grants: dict[str, list[tuple[str, str]]] | None = None,
        flags: tuple[str, ...] = (),
        binary: str | None = None,
        name: str = "dac-local",
        address: str = "127.0.0.1",
    ):
        """`tls` = (cacert, cert, key): serve https and require client certificates signed by
        the CA; the same cert and key serve as the health check's client identity. Without
        `tls`, `secure` makes a CA and certificates in `workdir/pki`, serves https with client
        certificates, and turns RBAC on with the three roles' credentials in
        `workdir/credentials` (`owners`: role -> (uid, gid) of its file; `extra_grants`: role ->
        more (permission, key prefix), for tests that use prefixes of their own). `address`:
        where it listens (clients and peers); its certificate names it and 127.0.0.1."""
        self.workdir = Path(workdir)
        self.address = address
        self.client_port, self.peer_port, self.pid = client_port, peer_port, pid
        self.secure = secure and tls is None
        self.owners, self.extra_grants = owners, extra_grants or {}
        self.flags = list(flags)  # more etcd flags, e.g. a short --auth-token-ttl for tests
        self.binary = binary  # another release's etcd (daclocal.etcd_releases); else the host's
        self.tls = tls
        self.name = name  # a member's name; one member per workdir unless in an EtcdCluster
        if self.secure:
            self.tls = (
                str(self.pki_dir / "ca.pem"),
                str(self.pki_dir / "server.pem"),
                str(self.pki_dir / "server.key"),
            )

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def credentials_dir(self) -> Path:
        return self.workdir / "credentials"

    def settings(self) -> EtcdSettings:
        """The `etcd` section of a dac config that reaches this server."""
        etcd: EtcdSettings = {"endpoints": [self.endpoint]}
        if self.secure:
            pki = self.pki_dir
            etcd.update(
                cacert=str(pki / "ca.pem"),
                cert=str(pki / "client.pem"),
                key=str(pki / "client.key"),
                credentials_dir=str(self.credentials_dir),
            )
        elif self.tls:
            etcd.update(cacert=self.tls[0], cert=self.tls[1], key=self.tls[2])
        return etcd

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.address}:{self.client_port}"

    @property
    def log(self) -> Path:
        return self.workdir / ("etcd.log" if self.name == "dac-local" else f"{self.name}.log")

    @property
    def data_dir(self) -> Path:
        return self.workdir / ("etcd-data" if self.name == "dac-local" else f"{self.name}-data")

    @property
    def peer_url(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.address}:{self.peer_port}"

    def start(self, timeout: float = 15.0) -> EtcdServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.secure:
            from daclocal.etcd_secure import make_pki

            make_pki(self.pki_dir, addresses=(self.address, "127.0.0.1"))
        for _ in range(5):  # a free port can be taken between probing and binding
            self.client_port, self.peer_port = free_port(), free_port()
            # the peer port too: raft messages from anyone who can connect would be trusted
            proc = self.spawn(f"{self.name}={self.peer_url}", ("10", "100"))
            if self._wait_healthy(proc, timeout):
                if self.secure:
                    self._enable_rbac()
                return self
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no log)"]
        raise AdminError(f"etcd did not start in {timeout:.0f}s: {tail[0]} (log: {self.log})")

    def spawn(self, initial_cluster: str, timing: tuple[str, str]) -> subprocess.Popen[bytes]:
        """Start this member of `initial_cluster` (name=peer URL,…) with `timing` =
        (heartbeat, election timeout) in ms; returns the process, not waiting for health."""
        client = self.endpoint
        proc = spawn(
            [
                self.binary or find_etcd(),
                "--name",
                self.name,
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                self.peer_url,
                "--initial-advertise-peer-urls",
                self.peer_url,
                "--initial-cluster",
                initial_cluster,
                "--initial-cluster-state",
                "new",
                "--heartbeat-interval",
                timing[0],
                "--election-timeout",
                timing[1],
                "--log-level",
                "warn",
                *self._tls_flags(),
                *self.flags,
            ],
            self.log,
        )
        self.pid = proc.pid
        return proc

    def _enable_rbac(self) -> None:
        from daclocal.etcd_secure import Pki, enable_rbac

        pki = self.pki_dir
        enable_rbac(
            self.endpoint,
            Pki(
                *(
                    str(pki / f)
                    for f in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")
                )
            ),
            self.credentials_dir,
            PREFIX,
            self.owners,
            self.extra_grants,
        )

    def _tls_flags(self) -> list[str]:
        if not self.tls:
            return []
        cacert, cert, key = self.tls
        peer = (
            [
                "--peer-cert-file",
                cert,
                "--peer-key-file",
                key,
                "--peer-trusted-ca-file",
                cacert,
                "--peer-client-cert-auth",
            ]
            if self.secure
            else []
        )
        return [
            "--cert-file",
            cert,
            "--key-file",
            key,
            "--trusted-ca-file",
            cacert,
            "--client-cert-auth",
            *peer,
        ]

    def _wait_healthy(self, proc: subprocess.Popen[bytes], timeout: float) -> bool:
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=self.tls[0])
            context.load_cert_chain(self.tls[1], self.tls[2])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(
                    self.endpoint + "/health", timeout=0.5, context=context
                ) as r:
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


class EtcdCluster:
    """`size` etcd members on loopback, `dac-local-1`…, sharing one PKI and the credentials
    (`workdir/pki`, `workdir/credentials`), each with its own data and log in `workdir`. etcd's
    default raft timing (100 ms heartbeat, 1 s election timeout): on a loaded machine the fast
    single-member timing would make members call elections for nothing."""

    TIMING = ("100", "1000")

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        owners: dict[str, tuple[int, int]] | None = None,
        binary: str | None = None,
    ):
        self.workdir = Path(workdir)
        self.members = [
            EtcdServer(workdir, owners=owners, binary=binary, name=f"dac-local-{i}")
            for i in range(1, size + 1)
        ]

    @property
    def pki_dir(self) -> Path:
        return self.members[0].pki_dir

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def settings(self) -> EtcdSettings:
        return {**self.members[0].settings(), "endpoints": self.endpoints}

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        from daclocal.etcd_secure import make_pki

        self.workdir.mkdir(parents=True, exist_ok=True)
        make_pki(self.pki_dir)
        for _ in range(5):  # a free port can be taken between probing and binding
            for m in self.members:
                m.client_port, m.peer_port = free_port(), free_port()
            initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
            procs = [m.spawn(initial, self.TIMING) for m in self.members]
            if all(m._wait_healthy(p, timeout) for m, p in zip(self.members, procs, strict=True)):
                self.members[0]._enable_rbac()
                return self
            self.stop()
            for m in self.members:
                shutil.rmtree(m.data_dir, ignore_errors=True)
        tail = self.members[0].log.read_text(errors="replace").strip().splitlines()[-1:] or [
            "(no log)"
        ]
        raise AdminError(
            f"etcd's {len(self.members)} members did not start in {timeout:.0f}s: "
            f"{tail[0]} (logs: {self.workdir})"
        )

    def stop(self) -> None:
        for m in self.members:
            if m.running():
                m.stop()
