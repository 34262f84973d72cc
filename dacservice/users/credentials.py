"""Who asks the user service: the uid, gid and request a munge credential carries, as munged
verified them (`decode_origin`), and that uid's rights from the system's group database
(`caller`), never from anything the client says.
"""

from __future__ import annotations

import json
from typing import Any

from daccore.errors import AdminError, UserError
from daccore.services import munge
from daccore.services.user_client import MAGIC, munge_argv, run_munge
from daccore.services.user_requests import Caller

__all__ = ["decode", "decode_origin", "caller"]


def decode(credential: bytes, socket_path: str = "") -> tuple[int, int, dict[str, Any]]:
    """(uid, gid, request) from a credential, as munged verified it; UserError when munged
    refuses it (bad, altered, replayed, expired, another key) or its payload is no request."""
    uid, gid, _, request = decode_origin(credential, socket_path)
    return uid, gid, request


def decode_origin(credential: bytes, socket_path: str = "") -> tuple[int, int, str, dict[str, Any]]:
    """(uid, gid, origin, request): `decode`'s, and the address the encoding munged wrote
    into the credential (ENCODE_HOST: munged's own, which the client cannot choose), '' when
    munged gave none. In-job stages check it against the job's node (daccore.services.injob)."""
    if munge.available():
        try:
            uid, gid, origin, payload = munge.decode(credential, socket_path)
        except munge.MungeRefused as e:
            raise UserError(f"credential refused: {str(e)[:200]}") from None
        except munge.MungeError as e:
            raise AdminError(
                f"the user service cannot reach munged: {str(e)[:200]} (an admin must check "
                "munged on the service's host)"
            ) from None
        return uid, gid, origin, _request(payload)
    r = run_munge(munge_argv("unmunge", socket_path), credential)
    meta, _, payload = r.stdout.partition(b"\n\n")
    # "STATUS: Replayed credential (17)", "UID: alice (1234)": the text, then the number
    fields = {
        k.strip(): v.strip().decode(errors="replace")
        for k, _, v in (line.partition(b":") for line in meta.splitlines())
    }
    status = fields.get(b"STATUS", "")
    if r.returncode != 0 or not status.endswith("(0)"):
        why = status.rpartition(" (")[0] or " ".join(r.stderr.decode(errors="replace").split())
        raise UserError(f"credential refused: {why.removeprefix('unmunge: Error: ')[:200]}")
    try:
        uid, gid = (int(fields[k].rpartition("(")[2].rstrip(")")) for k in (b"UID", b"GID"))
    except (KeyError, ValueError):
        raise UserError("credential refused: its payload is not a dac request") from None
    request = _request(payload)
    # "ENCODE_HOST: node1 (10.0.0.1)": the address in parentheses
    origin = fields.get(b"ENCODE_HOST", "").rpartition("(")[2].rstrip(")")
    return uid, gid, origin, request


def _request(payload: bytes) -> dict[str, Any]:
    """The dac request a credential carries; UserError when it carries something else."""
    try:
        request = json.loads(payload)
    except ValueError:
        raise UserError("credential refused: its payload is not a dac request") from None
    if not isinstance(request, dict) or request.get("magic") != MAGIC:
        raise UserError("credential refused: its payload is not a dac request")
    return request


def caller(uid: int, gid: int, admin_group: str, origin: str = "") -> Caller:
    """The rights of `uid`, from the group database: its primary group as munge gave it and
    the groups the system lists it in (a user unknown to passwd has only the munge gid)."""
    from daccore.rules.rights import groups_of, rights

    return Caller(uid, gid, rights(uid, groups_of(uid, gid), admin_group), origin)
