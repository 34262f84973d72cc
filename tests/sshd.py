"""A real sshd for tests: its own host key, config, pid file and authorized key, on an address
and port the test picks; and the client side dacd needs (a key pair and a known_hosts the
"admin" fills). Root only (sshd's privilege separation). Stopped by `stop()`, which fixtures
call in their finalizers.

A missing sshd fails (openssh-server is one of make deps' packages); with CI=true, as anywhere,
there is no skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def keygen(path: Path, comment: str = "dac-test") -> Path:
    """An ed25519 key pair at `path` (and `path`.pub)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    return path


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class Sshd:
    """One sshd. `prefix`: a command line to start it in (`ip netns exec …`, nsenter)."""

    def __init__(
        self,
        root: Path,
        authorized: Path,
        address: str = "127.0.0.1",
        port: int | None = None,
        prefix: list[str] | None = None,
    ):
        assert os.path.exists(SSHD), f"{SSHD} is missing: install openssh-server (make deps)"
        self.root, self.address = root, address
        self.port = port or free_port(address)
        self.prefix = prefix or []
        root.mkdir(parents=True, exist_ok=True)
        self.host_key = keygen(root / "ssh_host_ed25519_key", "host")
        shutil.copy(authorized, root / "authorized_keys")
        self.pidfile = root / "sshd.pid"
        self.config = root / "sshd_config"
        self.config.write_text(
            f"ListenAddress {address}\nPort {self.port}\nHostKey {self.host_key}\n"
            f"PidFile {self.pidfile}\nAuthorizedKeysFile {root}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "LogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
        )
        self.proc: subprocess.Popen | None = None

    def public_key(self) -> str:
        """The host key as known_hosts writes it: `<type> <base64>`."""
        return " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])

    def known_hosts_line(self, name: str | None = None) -> str:
        where = name or (self.address if self.port == 22 else f"[{self.address}]:{self.port}")
        return f"{where} {self.public_key()}\n"

    def start(self) -> Sshd:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.pidfile.unlink(missing_ok=True)  # a stopped one's: not this one's answer
        log = open(self.root / "sshd.log", "ab")
        # -D: stays in the foreground, so the test holds its pid; -e: errors to the log
        self.proc = subprocess.Popen(
            [*self.prefix, SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"sshd exited with {self.proc.returncode}: "
                    f"{(self.root / 'sshd.log').read_text()[-500:]}"
                )
            if self._answers():
                return self
            time.sleep(0.05)
        raise AssertionError(f"sshd on {self.address}:{self.port} did not answer within 10 s")

    def _answers(self) -> bool:
        if self.prefix:  # in another namespace: its pid file says it listens
            return self.pidfile.exists()
        try:
            with socket.create_connection((self.address, self.port), timeout=0.5) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def processes(self) -> list[int]:
        """The listener and every session process it forked."""
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
        children: dict[int, list[int]] = {}
        for line in out.stdout.splitlines():
            pid, ppid = map(int, line.split())
            children.setdefault(ppid, []).append(pid)
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found

    def signal_all(self, sig: int) -> None:
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is None:
            return
        self.signal_all(signal.SIGCONT)
        self.signal_all(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None
