"""dac's user service: users' dacctl commands, answered for the uid munge vouches for.

Ordinary users hold no etcd credential (docs/security.md). Their `dacctl status`, `pools`,
`buffers`, `show`, `estimate`, `create-persistent` and `destroy-persistent` reach etcd through
this service, which runs as SlurmUser with its own credential on `user_service` (host:port).

The wire protocol is one request per TCP connection: the client sends one munge credential
(`munge -s <request>`, base64 text) and a newline; the service answers one JSON line and
closes. The request (a JSON object: verb and arguments) is the credential's payload, so munge
authenticates it together with the uid and gid: it cannot be altered, and munged refuses it a
second time (replay) or after its TTL. The caller's rights come from the verified uid and the
system's group database, never from anything the client says (`caller`).

Reply: {"ok": answer} or {"error": {"kind": "user"|"admin"|"internal", "message": one line}}.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import socket
import socketserver
import subprocess
import threading
import time

from daccore.errors import AdminError, DacError, InternalError, Kind, UserError
from daccore.user_requests import Caller, answer

__all__ = ["serve", "ask", "caller", "decode", "MAX_REQUEST", "READ_TIMEOUT", "MAX_CLIENTS"]

log = logging.getLogger(__name__)

#: bytes of one credential: a request payload is well under 1 KiB, its credential ~1.4x that
MAX_REQUEST = 8192
#: seconds a client has to send its credential: a slow or silent client holds no slot longer
READ_TIMEOUT = 5.0
#: requests served at once; more are told the service is busy (create-persistent may wait
#: step_timeout for dacd, so a slot is not always short)
MAX_CLIENTS = 32
#: seconds munge or unmunge may take (a local socket round trip: ~1.3 ms measured)
MUNGE_TIMEOUT = 10.0
_MAGIC = "dac-user/1"  # in every payload: a munge credential made for something else is refused


def _munge_argv(tool: str, socket_path: str) -> list[str]:
    return [tool, *([f"--socket={socket_path}"] if socket_path else [])]


def _run_munge(argv: list[str], data: bytes | None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=data, capture_output=True, timeout=MUNGE_TIMEOUT)
    except FileNotFoundError:
        raise AdminError(f"{argv[0]} is not installed on this host: an admin must install munge "
                         "(dac's user service authenticates users with it)") from None
    except subprocess.TimeoutExpired:
        raise AdminError(f"{argv[0]} did not answer in {MUNGE_TIMEOUT:.0f}s: an admin must check "
                         "munged on this host") from None


# -- the service's side ------------------------------------------------------------------------

def decode(credential: bytes, socket_path: str = "") -> tuple[int, int, dict]:
    """(uid, gid, request) from a credential, as munged verified it; UserError when munged
    refuses it (bad, altered, replayed, expired, another key) or its payload is no request."""
    r = _run_munge(_munge_argv("unmunge", socket_path), credential)
    meta, _, payload = r.stdout.partition(b"\n\n")
    # "STATUS: Replayed credential (17)", "UID: alice (1234)": the text, then the number
    fields = {k.strip(): v.strip().decode(errors="replace") for k, _, v in
              (line.partition(b":") for line in meta.splitlines())}
    status = fields.get(b"STATUS", "")
    if r.returncode != 0 or not status.endswith("(0)"):
        why = status.rpartition(" (")[0] or " ".join(r.stderr.decode(errors="replace").split())
        raise UserError(f"credential refused: {why.removeprefix('unmunge: Error: ')[:200]}")
    try:
        uid, gid = (int(fields[k].rpartition("(")[2].rstrip(")")) for k in (b"UID", b"GID"))
        request = json.loads(payload)
    except (KeyError, ValueError):
        raise UserError("credential refused: its payload is not a dac request") from None
    if not isinstance(request, dict) or request.get("magic") != _MAGIC:
        raise UserError("credential refused: its payload is not a dac request")
    return uid, gid, request


def caller(uid: int, gid: int, admin_group: str) -> Caller:
    """The rights of `uid`, from the group database: its primary group as munge gave it and
    the groups the system lists it in (a user unknown to passwd has only the munge gid)."""
    from daccore.admin import rights
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:
        groups = [gid]
    return Caller(uid, gid, rights(uid, groups, admin_group))


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._reply({"error": {"kind": "admin", "message": (
                f"dac's user service is busy ({MAX_CLIENTS} requests at once): try again")}})
            return
        try:
            self._reply(self._answer())
        finally:
            self.server.slots.release()

    def _answer(self) -> dict:
        uid = verb = None
        try:
            credential = self._read()
            uid, gid, request = decode(credential, self.server.config.munge_socket)
            verb = request.get("verb")
            who = caller(uid, gid, self.server.config.admin_group)
            result = answer(self.server.store, self.server.config, who, verb,
                            request.get("args", {}))
            log.info("uid %s: %s %s: ok", uid, json.dumps(verb),
                     json.dumps(request.get("args")))
            return {"ok": result}
        except DacError as e:
            log.info("uid %s: %s: refused: %s", uid, json.dumps(verb), e)
            return {"error": {"kind": e.kind.value, "message": str(e)}}
        except Exception:  # a bug must not end the service, nor reach the user as a traceback
            log.exception("uid %s: %s: failed", uid, json.dumps(verb))
            return {"error": {"kind": "internal", "message": (
                "dac's user service failed on this request: an admin finds why in its log")}}

    def _read(self) -> bytes:
        """One line, read by `READ_TIMEOUT` and at most `MAX_REQUEST` bytes."""
        deadline = time.monotonic() + READ_TIMEOUT
        data = b""
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UserError(f"request not received within {READ_TIMEOUT:.0f}s")
            self.connection.settimeout(left)
            try:
                chunk = self.connection.recv(MAX_REQUEST + 1 - len(data))
            except socket.timeout:
                continue
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST:
                raise UserError(f"request larger than {MAX_REQUEST} bytes")
        line = data.split(b"\n", 1)[0].strip()
        if not line.startswith(b"MUNGE:"):
            raise UserError("request is not a munge credential (run dacctl, which makes one)")
        return line

    def _reply(self, reply: dict) -> None:
        """Send the reply, then read what the client still sends (an oversize request) for up
        to a second: closing with unread bytes would reset the connection, and a reset makes
        the client's kernel drop the reply before dacctl reads it."""
        c = self.connection
        try:
            c.settimeout(READ_TIMEOUT)
            c.sendall(json.dumps(reply).encode() + b"\n")
            c.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 1.0
            while (left := deadline - time.monotonic()) > 0:
                c.settimeout(left)
                if not c.recv(65536):
                    break
        except OSError:
            pass  # the client went away or kept sending: nothing more is owed to it


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # a full backlog makes the kernel hold clients, not this process
    request_queue_size = 128

    def __init__(self, address, config, store):
        self.config, self.store = config, store
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, _Handler)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def serve(config, ready=None) -> None:
    """Answer requests on `config.user_service` until SIGTERM/SIGINT; `ready()` is called
    once the port is listening."""
    import signal

    from daccore.store import Store
    if not config.user_service:
        raise AdminError("user_service is not set in the config: set it to host:port "
                         "(docs/security.md)")
    store = Store.from_settings(config.etcd, role="slurm")  # Slurm's rights, no more
    try:
        server = _Server(_split(config.user_service), config, store)
    except OSError as e:
        raise AdminError(f"user service cannot listen on {config.user_service}: "
                         f"{e.strerror}") from None

    def stop(signum, frame):  # shutdown() waits for serve_forever, so from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("dac user service on %s (munge socket %s)", config.user_service,
             config.munge_socket or "munge's default")
    if ready:
        ready()
    with server:
        server.serve_forever(poll_interval=0.5)


# -- the client's side -------------------------------------------------------------------------

_KINDS = {Kind.USER.value: UserError, Kind.ADMIN.value: AdminError,
          Kind.INTERNAL.value: InternalError}


def ask(config, verb: str, args: dict, timeout: float | None = None) -> dict:
    """`verb`'s answer from the user service, for the uid this process runs as; the service's
    refusal is raised as the DacError of its kind, with its line."""
    payload = json.dumps({"magic": _MAGIC, "verb": verb, "args": args})
    r = _run_munge([*_munge_argv("munge", config.munge_socket), "-s", payload], None)
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise AdminError(f"munge cannot make a credential here: {why[-1]} (an admin must "
                         "start munged on this host)")
    # create/destroy wait for dacd as long as the service does; reads answer in milliseconds
    timeout = timeout or config.step_timeout + 30
    where = config.user_service
    try:
        with socket.create_connection(_split(where), timeout=10) as s:
            s.settimeout(timeout)
            s.sendall(r.stdout.strip() + b"\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as e:
        raise AdminError(f"dac's user service at {where} is unreachable: "
                         f"{e.strerror or e} (an admin must start it: systemctl start "
                         "dac-users)") from None
    try:
        reply = json.loads(data)
        if "ok" in reply:
            return reply["ok"]
        kind, message = reply["error"]["kind"], reply["error"]["message"]
    except (ValueError, KeyError, TypeError):
        raise AdminError(f"dac's user service at {where} answered something that is not a "
                         "reply: an admin must check it is dac's") from None
    # one line, and nothing a terminal would act on, whatever the other end sent
    line = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in " ".join(
        str(message).split()))
    raise _KINDS.get(kind, InternalError)(line)
