"""A single-node etcd on free loopback ports, for the local DAC and the store tests."""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.request
from pathlib import Path

from daccore.errors import AdminError
from daclocal.procs import free_port, is_running, spawn, stop_pid

__all__ = ["find_etcd", "EtcdServer"]


def find_etcd() -> str:
    path = shutil.which("etcd") or shutil.which("etcd", path="/usr/bin:/usr/local/bin")
    if not path:
        raise AdminError("etcd is not installed: run `make deps` (installs Debian's etcd-server)")
    return path


class EtcdServer:
    """One etcd process with its data in `workdir`. Fast election flags: healthy in ~0.1 s."""

    def __init__(self, workdir: Path, client_port: int = 0, peer_port: int = 0,
                 pid: int = 0, tls: tuple[str, str, str] | None = None):
        """`tls` = (cacert, cert, key): serve https and require client certificates signed by
        the CA; the same cert and key serve as the health check's client identity."""
        self.workdir = Path(workdir)
        self.client_port, self.peer_port, self.pid = client_port, peer_port, pid
        self.tls = tls

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    @property
    def log(self) -> Path:
        return self.workdir / "etcd.log"

    def start(self, timeout: float = 15.0) -> EtcdServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # a free port can be taken between probing and binding
            self.client_port, self.peer_port = free_port(), free_port()
            client, peer = self.endpoint, f"http://127.0.0.1:{self.peer_port}"
            proc = spawn([find_etcd(), "--name", "dac-local",
                          "--data-dir", str(self.workdir / "etcd-data"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", f"dac-local={peer}",
                          "--heartbeat-interval", "10", "--election-timeout", "100",
                          "--log-level", "warn", *self._tls_flags()], self.log)
            self.pid = proc.pid
            if self._wait_healthy(proc, timeout):
                return self
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no log)"]
        raise AdminError(f"etcd did not start in {timeout:.0f}s: {tail[0]} (log: {self.log})")

    def _tls_flags(self) -> list[str]:
        if not self.tls:
            return []
        cacert, cert, key = self.tls
        return ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", cacert,
                "--client-cert-auth"]

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
