"""The user service's own replies, which both the reader and the workers send: an error of its
kind, the service busy, a failure of the service's own, and the end of a reply.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from daccore.errors import AdminError, DacError

__all__ = ["INTERNAL", "error", "busy_error", "whose", "finish", "send_now"]

#: a bug's reply: the user is told where an admin looks, never a traceback
INTERNAL: dict[str, Any] = {
    "error": {
        "kind": "internal",
        "message": ("dac's user service failed on this request: an admin finds why in its log"),
    }
}


def error(e: DacError) -> dict[str, Any]:
    return {"error": {"kind": e.kind.value, "message": str(e)}}


def busy_error(why: str) -> AdminError:
    return AdminError(f"dac's user service is busy ({why}): try again")


def whose(peer: str) -> str:
    """Whose, in a busy line: the peer's own, as the user it names reads it."""
    return "of yours" if peer.startswith("uid ") else "from your host"


def finish(sock: socket.socket) -> None:
    """The end of a reply: the write side shut, then the close."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    sock.close()


def send_now(sock: socket.socket, reply: dict[str, Any]) -> None:
    """A short reply to a connection the reader no longer holds, then the close."""
    try:
        sock.send(json.dumps(reply).encode() + b"\n")
    except OSError:
        pass
    finish(sock)
