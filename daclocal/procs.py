"""Starting and stopping the local DAC's processes, and finding free loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["free_port", "spawn", "python_module", "is_running", "stop_pid", "child_env"]

#: Variables that would point a child at some other DAC (they win over the config file).
_FOREIGN = (
    "DAC_ETCD_ENDPOINTS",
    "ETCDCTL_ENDPOINTS",
    "ETCDCTL_CACERT",
    "ETCDCTL_CERT",
    "ETCDCTL_KEY",
    "DAC_CONFIG",
    "SLURM_CONF",
)


def child_env(**extra: str) -> dict[str, str]:
    """This environment minus anything naming another DAC or Slurm, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    env.update(extra)
    return env


#: every port free_port handed out in this process
_given: set[int] = set()


def free_port() -> int:
    """A loopback TCP port nobody listens on right now, and never one this process handed out
    before: `up` picks every daemon's ports before any listens, and the kernel can give the
    same free port twice (seen: both dacds of one `up` given one metrics port)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port


def python_module(module: str, *args: str) -> list[str]:
    """The argv that runs one of dac's modules with this interpreter, isolated (-I): `-m`
    alone puts the current directory first on sys.path, and root runs `dacctl local up` from
    wherever it stands, a directory other users can write among them (issue 45: a `dacd/`
    planted in /tmp ran as root). -I also drops PYTHONPATH and the user site: dac is imported
    from the interpreter's own site-packages, where pip (editable or not) installed it."""
    return [sys.executable, "-I", "-m", module, *args]


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a daemon in its own session, so it outlives the command that started it. Its log
    is root's and 0600: daemons log other users' paths, buffer names and errors. It starts in
    `/`, not in the caller's directory, which may be anyone's: what the daemons run there
    looks in the current directory too (Ansible for ansible.cfg, Lua's `./?.so` in
    package.cpath)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "ab") as out:
        os.fchmod(fd, 0o600)  # whatever the umask, and a log an older up left 0644
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
            cwd="/",
        )


#: /proc/<pid>/stat's flag for a kernel thread, which has no command line either
_PF_KTHREAD = 0x00200000


def is_running(pid: int, marker: str = "") -> bool:
    """True when `pid` is alive and, given a marker, its command line contains it (so a pid
    reused by an unrelated process is never mistaken for ours).

    A process caught inside execve has no command line yet: Popen returns once the old program
    is gone, before the kernel has laid out the new one's arguments (13 of 200 spawns of `sleep`
    read an empty command line right after Popen here, with a cold page cache; a `make demo`
    run just after the test suite took its munged for dead and left it running). So an empty
    command line counts as running, unless it is a kernel thread's."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = stat.rsplit(b")", 1)[1].split()
    if fields[0] == b"Z":
        return False
    if not cmdline:
        return not int(fields[6]) & _PF_KTHREAD
    return marker.encode() in cmdline.replace(b"\0", b" ")


def stop_pid(pid: int, marker: str = "", timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; returns once the process is gone."""
    if not is_running(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_running(pid, marker):
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    while is_running(pid, marker):
        _reap(pid)
        time.sleep(0.02)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
