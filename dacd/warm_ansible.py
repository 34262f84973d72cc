"""A warm `ansible-playbook`: one process that has imported Ansible forks a playbook run for each
request, so a run does not pay Ansible's import (0.6-0.8 s of a 1.3 s empty run here; see
docs/performance.md).

ansible-runner still runs every step: dacd gives it `dacd/warm_ansible_client.py` as its
`binary`. The client hands this server its argv, environment, working directory and its stdin,
stdout and stderr (the pty runner reads events from), and exits with the run's exit code. A
child that cannot run warm (the server gone, or an environment that would configure Ansible
differently from the one it imported under) runs the real `ansible-playbook` instead, so the
warm path changes speed, never behaviour.

Started by dacd (`python -I -m dacd.warm_ansible SOCKET`), single-threaded so that fork is safe;
only the owner's uid may connect (SO_PEERCRED) and the socket lives in a 0700 directory.
"""

from __future__ import annotations

import array
import atexit
import io
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings

TYPE_CHECKING = False  # typing's own without importing typing (the server needs none); mypy: True
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import IO, TypedDict

    class Request(TypedDict):
        """A client's request, as dacd/warm_ansible_client.py sends it (JSON)."""

        argv: list[str]
        env: dict[str, str]
        cwd: str


#: Ansible settings that runner sets per run; a child takes each from its own request, so they
#: do not stop the warm path. Every other ANSIBLE_* variable must match the server's.
PER_RUN = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": "CACHE_PLUGIN_CONNECTION"}
#: What a request may carry: argv, environment and paths are small; 1 MiB is generous.
MAX_REQUEST = 1 << 20
#: Modules every playbook run of dac's loads: imported once, in the server.
PRELOAD = (
    "ansible.cli.playbook",
    "ansible.executor.playbook_executor",
    "ansible.executor.task_queue_manager",
    "ansible.executor.task_executor",
    "ansible.executor.process.worker",
    "ansible.executor.module_common",
    "ansible.inventory.manager",
    "ansible.vars.manager",
    "ansible.playbook.play",
    "ansible.template",
    "ansible.parsing.dataloader",
)
#: Plugin loaders whose plugins (and their YAML documentation, which Ansible parses to learn
#: their options: 0.3 s a run) the server loads once. Not callbacks: runner's callback reads the
#: run's environment when it is imported, so each run imports it itself.
WARM_LOADERS = (
    "connection_loader",
    "shell_loader",
    "strategy_loader",
    "inventory_loader",
    "cache_loader",
    "vars_loader",
    "become_loader",
    "filter_loader",
    "test_loader",
    "action_loader",
    "lookup_loader",
)
ALREADY_CONFIGURED = "AnsibleCollectionFinder has already been configured"

log = logging.getLogger("dacd.warm_ansible")


def ansible_key(env: Mapping[str, str], cwd: str) -> dict[str, str | bool]:
    """What Ansible reads from the environment when it is imported: a request whose key differs
    from the server's cannot run on the server's imported modules."""
    key: dict[str, str | bool] = {
        k: v for k, v in env.items() if k.startswith("ANSIBLE_") and k not in PER_RUN
    }
    key["cwd ansible.cfg"] = os.path.exists(os.path.join(cwd, "ansible.cfg"))
    key["home"] = env.get("HOME", "")
    return key


def recv_request(conn: socket.socket) -> tuple[Request, list[int]]:
    """One request: a 4-byte length, then JSON, with the client's three stdio fds attached."""
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(msg) != 4:
        raise ValueError("short request")
    size, body = struct.unpack("!I", msg)[0], b""
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("truncated request")
        body += chunk
    return json.loads(body), list(fds)


class WarmAnsible:
    """dacd's handle on its server: started with dacd, restarted if it dies, gone with dacd (it
    reads its stdin, a pipe from dacd, and leaves at end of file, even after a kill -9)."""

    CLIENT_SOURCE = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "warm_ansible_client.py"
    )

    def __init__(self, log: IO[str] | IO[bytes] | int | None = None) -> None:
        self._log = log  # where the server logs (default: dacd's stderr)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._install()

    def _install(self) -> None:
        """A fresh directory (0700, this uid's) holding the client and, once started, the
        server's socket."""
        self._dir = tempfile.mkdtemp(prefix="dac-ansible-")
        self.socket = os.path.join(self._dir, "sock")
        # runner's `binary`: the client, started by this interpreter (-IS: standard library
        # only, milliseconds), executable whatever the install kept of the file's mode
        self.client = os.path.join(self._dir, "ansible-playbook")
        with open(self.CLIENT_SOURCE) as f:
            source = f.read().split("\n", 1)[1]
        fd = os.open(self.client, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w") as f:
            f.write(f"#!{sys.executable} -IS\n{source}")

    def ensure(self) -> str:
        """The socket path, with a live server behind it (a run that finds no server yet runs
        cold, so this never waits). Read `client` after it: when something removed the
        directory (a temp cleaner on a long-lived dacd; seen once in make test), the client
        and the server move to a new one rather than every step failing."""
        with self._lock:
            if not os.path.isfile(self.client):
                log.warning("%s was removed: warm Ansible moves to a new directory", self._dir)
                self._stop_server()
                self._install()
            if self._proc is None or self._proc.poll() is not None:
                if os.path.exists(self.socket):
                    os.unlink(self.socket)
                # -I: `-m` alone puts the current directory first on sys.path, and dacd may
                # have been started in anyone's (issue 45); dac comes from the interpreter's
                # site-packages. `/`: the server needs no directory (a run moves to its own)
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-m", "dacd.warm_ansible", self.socket],
                    stdin=subprocess.PIPE,
                    stderr=self._log,
                    cwd="/",
                )
        return self.socket

    def stop(self) -> None:
        with self._lock:
            self._stop_server()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _stop_server(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None


class Server:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.key: dict[str, str | bool] | None = None  # the environment Ansible was imported under
        self.cold = False  # Ansible would not import here: every run is a fresh one
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.sel.register(sys.stdin.fileno(), selectors.EVENT_READ)  # dacd's pipe

    def serve(self) -> None:
        while True:
            for event, _ in self.sel.select():
                if event.fileobj is self.sock:
                    self._accept()
                elif event.fd == sys.stdin.fileno():
                    if not os.read(event.fd, 64):
                        return  # dacd is gone: so are we (runs in flight finish on their own)
                else:
                    self._reap(event.fd, *event.data)

    def _accept(self) -> None:
        conn, _ = self.sock.accept()
        fds: list[int] = []
        try:
            uid = struct.unpack(
                "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            )[1]
            if uid != os.getuid():
                raise PermissionError(f"uid {uid} may not run playbooks here")
            request, fds = recv_request(conn)
            if len(fds) != 3:
                raise ValueError("a request carries stdin, stdout and stderr")
            if self.key is None and not self.cold:
                try:
                    self._import_ansible(request)
                except Exception as e:  # noqa: BLE001 - then every run is a fresh one
                    log.warning(
                        "cannot import Ansible (%s: %s): every run goes cold", type(e).__name__, e
                    )
                    self.cold = True
            warm = self.key is not None and ansible_key(request["env"], request["cwd"]) == self.key
            pid = os.fork()
            if pid == 0:
                self.sel.close()
                self.sock.close()
                os.close(0)
                _child(conn, request, fds, warm)
            self.sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            # one line per run in dacd's log: a run that goes cold says so
            log.info(
                "run %d %s: %s in %s",
                pid,
                "warm" if warm else "cold",
                " ".join(request["argv"][1:2]),
                request["cwd"],
            )
            try:
                conn.sendall(f"pid {pid}\n".encode())
            except OSError:
                pass  # the client left already: its run sees that and stops
        except (OSError, ValueError, KeyError, TypeError) as e:
            try:
                conn.sendall(f"error {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _reap(self, pidfd: int, pid: int, conn: socket.socket) -> None:
        self.sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        try:
            conn.sendall(f"rc {os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:
            pass  # the client is gone: nobody waits for this run
        conn.close()

    def _import_ansible(self, request: Request) -> None:
        """Import Ansible under the first request's environment (it reads its settings at
        import); every later request that would read the same settings runs warm."""
        import importlib

        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for name in PRELOAD:
            importlib.import_module(name)
        from ansible.plugins import loader

        loader.init_plugin_loader([])  # the collection finder, with ansible.builtin's routing
        for name in WARM_LOADERS:
            for _ in getattr(loader, name).all(class_only=True):
                pass
        from ansible import constants as C
        from ansible.config.manager import cleanup_tmp_file

        # Ansible made its local temp dir at import and removes it at exit: each child makes
        # its own instead (below), so one child's exit cannot remove another's
        atexit.unregister(cleanup_tmp_file)
        shutil.rmtree(C.DEFAULT_LOCAL_TMP, ignore_errors=True)
        self.key = ansible_key(request["env"], request["cwd"])
        os.chdir("/")


def _child(conn: socket.socket, request: Request, fds: list[int], warm: bool) -> None:
    """The forked run; never returns."""
    try:
        os.setsid()  # its own process group: a vanished client takes the whole run down
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        if not warm:
            os.execvp("ansible-playbook", ["ansible-playbook", *argv[1:]])
        logging.root.handlers.clear()  # the server's log is not this run's output
        logging.root.setLevel(logging.WARNING)
        # the plugin loader the server set up serves this run; Ansible says so if asked twice
        warnings.filterwarnings("ignore", message=ALREADY_CONFIGURED)
        threading.Thread(target=_end_with_client, args=(conn,), daemon=True).start()
        from ansible import constants as C

        for env, name in PER_RUN.items():
            if env in request["env"]:
                setattr(C, name, request["env"][env])
        # a temp dir of its own, where the server's was (ansible-core 2.19's
        # get_config_value("DEFAULT_LOCAL_TMP") does not template '{{ ANSIBLE_HOME }}': it
        # made a literal '{{ ANSIBLE_HOME ~ "/tmp" }}' directory in the playbooks' folder)
        from ansible.config.manager import cleanup_tmp_file

        base = os.path.dirname(C.DEFAULT_LOCAL_TMP)  # the server's, templated at its import
        os.makedirs(base, mode=0o700, exist_ok=True)
        C.DEFAULT_LOCAL_TMP = tempfile.mkdtemp(prefix=f"ansible-local-{os.getpid()}", dir=base)
        atexit.register(cleanup_tmp_file, C.DEFAULT_LOCAL_TMP, warn=True)
        # runner sets PYTHONUNBUFFERED so it sees events as they happen; this interpreter
        # started without it
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True, write_through=True)
        sys.argv = ["ansible-playbook", *argv[1:]]
        from ansible.cli.playbook import main

        try:
            main()
            rc = 0
        except SystemExit as e:  # sys.exit's rules: None is success, any other object 1
            rc = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # what a real ansible-playbook's exit runs: its temp dirs go
        try:  # said here too, so a server that left meanwhile cannot lose it
            conn.sendall(f"rc {rc}\n".encode())
        except OSError:
            pass
        os._exit(rc)
    except BaseException as e:  # noqa: BLE001 - a run that cannot start says why, on its stderr
        os.write(2, f"dac warm ansible: {type(e).__name__}: {e}\n".encode())
        os._exit(250)


def _end_with_client(conn: socket.socket) -> None:
    """The client never sends after its request: end of stream means it is gone (runner's
    timeout or cancel killed it), so stop this run and everything it started."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGTERM)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m dacd.warm_ansible SOCKET", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,  # dacd's log, dacd's format
        format="%(asctime)s %(levelname)s dac-ansible[%(process)d] %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        Server(sys.argv[1]).serve()
    finally:
        shutil.rmtree(os.path.dirname(sys.argv[1]), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
