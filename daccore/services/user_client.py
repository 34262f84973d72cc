"""The client of dac's user service (dacservice.users), and the wire both ends share.

Ordinary users hold no etcd credential (docs/security.md): their `dacctl status`, `pools`,
`buffers`, `show`, `estimate`, `create-persistent` and `destroy-persistent` ask the service
on `user_service` (host:port) with `ask`.

The wire protocol is one request per TCP connection: the client sends one munge credential
(base64 text, as `munge -s <request>` prints it: made in-process through libmunge,
daccore.services.munge, or by running `munge` where the library cannot be loaded) and a
newline; the service answers one JSON line and closes. The request (a JSON object: MAGIC, verb
and arguments) is the credential's payload, so munge authenticates it together with the uid
and gid: it cannot be altered, and munged refuses it a second time (replay) or after its TTL.

Reply: {"ok": answer} or {"error": {"kind": "user"|"admin"|"internal", "message": one line}}.
"""

from __future__ import annotations

import json
import socket
import subprocess

from daccore.errors import AdminError, InternalError, Kind, UserError

TYPE_CHECKING = False  # typing's own, without importing typing on a user's command; mypy: True
if TYPE_CHECKING:
    from daccore.settings.cache import Json
    from daccore.settings.config import DacConfig

__all__ = [
    "ask",
    "credential_for",
    "MAGIC",
    "MUNGE_TIMEOUT",
    "munge_argv",
    "run_munge",
    "split_address",
]

#: seconds munge or unmunge may take (a local socket round trip: ~1.3 ms measured)
MUNGE_TIMEOUT = 10.0
#: in every payload: a munge credential made for something else is refused
MAGIC = "dac-user/1"


def munge_argv(tool: str, socket_path: str) -> list[str]:
    """`munge` or `unmunge`, on munged's `socket_path` (its default when empty): run only
    where libmunge cannot be loaded (daccore.services.munge)."""
    return [tool, *([f"--socket={socket_path}"] if socket_path else [])]


def run_munge(argv: list[str], data: bytes | None) -> subprocess.CompletedProcess[bytes]:
    """`argv` run with `data` on its stdin; AdminError when munge is missing or hangs."""
    try:
        return subprocess.run(argv, input=data, capture_output=True, timeout=MUNGE_TIMEOUT)
    except FileNotFoundError:
        raise AdminError(
            f"{argv[0]} is not installed on this host: an admin must install munge "
            "(dac's user service authenticates users with it)"
        ) from None
    except subprocess.TimeoutExpired:
        raise AdminError(
            f"{argv[0]} did not answer in {MUNGE_TIMEOUT:.0f}s: an admin must check "
            "munged on this host"
        ) from None


def credential_for(payload: str, socket_path: str) -> bytes:
    """A munge credential for `payload`, for this process's uid: through libmunge when it
    loads here, else by running `munge`; AdminError (one line) when munged cannot make one."""
    from daccore.services import munge

    if munge.available():
        try:
            return munge.encode(payload.encode(), socket_path)
        except munge.MungeError as e:
            raise AdminError(
                f"munge cannot make a credential here: {e} (an admin must start munged "
                "on this host)"
            ) from None
    r = run_munge([*munge_argv("munge", socket_path), "-s", payload], None)
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise AdminError(
            f"munge cannot make a credential here: {why[-1]} (an admin must "
            "start munged on this host)"
        )
    return r.stdout.strip()


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of `user_service`: `host:port`, `[v6]:port`."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


_KINDS = {
    Kind.USER.value: UserError,
    Kind.ADMIN.value: AdminError,
    Kind.INTERNAL.value: InternalError,
}


def ask(config: DacConfig, verb: str, args: Json, timeout: float | None = None) -> Json:
    """`verb`'s answer from the user service, for the uid this process runs as; the service's
    refusal is raised as the DacError of its kind, with its line."""
    payload = json.dumps({"magic": MAGIC, "verb": verb, "args": args})
    credential = credential_for(payload, config.munge_socket)
    # create/destroy wait for dacd as long as the service does; reads answer in milliseconds
    timeout = timeout or config.step_timeout + 30
    where = config.user_service
    try:
        with socket.create_connection(split_address(where), timeout=10) as s:
            s.settimeout(timeout)
            s.sendall(credential + b"\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as e:
        raise AdminError(
            f"dac's user service at {where} is unreachable: "
            f"{e.strerror or e} (an admin must start it: systemctl start "
            "dac-users)"
        ) from None
    try:
        reply = json.loads(data)
        if "ok" in reply:
            ok: Json = reply["ok"]  # every verb answers an object (user_requests.answer)
            return ok
        kind, message = reply["error"]["kind"], reply["error"]["message"]
    except (ValueError, KeyError, TypeError):
        raise AdminError(
            f"dac's user service at {where} answered something that is not a "
            "reply: an admin must check it is dac's"
        ) from None
    # one line, and nothing a terminal would act on, whatever the other end sent
    line = "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" for c in " ".join(str(message).split())
    )
    raise _KINDS.get(kind, InternalError)(line)
