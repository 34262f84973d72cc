"""What a buffer record may hold: the one place of the rules that dacctl writes by and dacd
reads by, so that dacctl can never write what dacd would refuse.

etcd is a boundary, not a proof: dacd (root) acts on every record it reads, so it checks each
one before acting (docs/security.md, "dacd trusts nothing it reads"):

- names (buffers, hosts, bricks, pools, compute nodes) and attachment keys (job ids) match
  the strict patterns below: nothing that a path, a shell or Jinja would read specially;
- the owner's uid and gid are at or above the config's `min_owner_uid` (root only where the
  config says 0);
- every brick is one this dacd's config lists, on the host and in the pool the record says,
  with the capacity the config gives it; the device is never read from the record;
- sizes and counts are bounded: the request fits in the bricks allocated, swap in the
  request, stage lines and attachments in fixed limits.

Static rules (patterns, bounds) are in `daccore.records.models` through the constants of
`daccore.records.bounds`; the rules that need dacd's config are `check_buffer`. No pydantic at
import: the Slurm hooks use the patterns on their hot path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from daccore.errors import AdminError, UserError
from daccore.records.bounds import JOB_KEY, MAX_NODES, NAME

if TYPE_CHECKING:
    from daccore.records.models import Buffer
    from daccore.settings.config import DacConfig

__all__ = ["Untrusted", "check_buffer", "check_owner", "check_attachment", "parse_buffer", "shown"]

_NAME, _JOB = re.compile(NAME), re.compile(JOB_KEY)


class Untrusted(AdminError):
    """A record dacd refuses to act on: etcd was written by something other than dac's
    validated writers, or the dacds' configs disagree. An admin must look."""


def shown(value: object, limit: int = 60) -> str:
    """An untrusted value fit for one log line: quoted, escaped, cut short."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_owner(uid: int, gid: int, min_owner_uid: int) -> None:
    """Writers and dacd alike: root (or a system account) owns a buffer only when the config
    says so (`min_owner_uid: 0`). Never past 32 bits, all a uid or gid holds: an admin's
    create-persistent may name any number, which the record's own check would fail later as
    an internal error."""
    for what, value in (("uid", uid), ("gid", gid)):
        if value >= 1 << 32:
            raise UserError(f"owner {what} {value} is no {what}: they are below {1 << 32}")
        if value < min_owner_uid:
            raise UserError(
                f"owner {what} {value} is below min_owner_uid {min_owner_uid}: "
                "a buffer belongs to an ordinary user and group"
            )


def check_attachment(job: str, nodes: list[str]) -> None:
    """What the Slurm functions may record as an attachment (job id -> compute nodes)."""
    if not _JOB.match(job):
        raise UserError(f"job id {shown(job)} is not a number")
    bad = [n for n in nodes if not _NAME.match(n)]
    if bad or len(nodes) > MAX_NODES:
        raise AdminError(f"job {job}: unusable node names {shown(bad or len(nodes))}")


def parse_buffer(key: str, text: str | bytes, config: DacConfig) -> Buffer:
    """The buffer record at `key`, checked by every rule, or Untrusted with one line naming
    the key and the first rule it breaks."""
    from pydantic import ValidationError

    from daccore.records.models import Buffer

    try:
        buf = Buffer.model_validate_json(text)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "record"
        raise Untrusted(f"{key}: {shown(where, 80)}: {err['msg']}") from None
    if key.rsplit("/", 1)[-1] != buf.name:
        raise Untrusted(f"{key}: names buffer {shown(buf.name)}")
    try:
        check_buffer(buf, config)
    except (UserError, AdminError) as e:
        raise Untrusted(f"{key}: {e}") from None
    return buf


def check_buffer(buf: Buffer, config: DacConfig) -> None:
    """The rules that need the config: the owner, the bricks and the sizes."""
    check_owner(buf.owner_uid, buf.owner_gid, config.min_owner_uid)
    pool = buf.request.pool
    if pool not in config.pools:
        raise AdminError(f"pool {shown(pool)} is not in this dacd's config")
    for ref in buf.allocation.bricks:
        host = config.hosts.get(ref.host)
        brick = next((b for b in host.bricks if b.brick_name == ref.brick), None) if host else None
        if brick is None:
            raise AdminError(f"brick {ref.host}:{ref.brick} is not in this dacd's config")
        if brick.pool != pool:
            raise AdminError(
                f"brick {ref.host}:{ref.brick} is in pool '{brick.pool}', not '{pool}'"
            )
        if ref.capacity != brick.capacity:
            raise AdminError(
                f"brick {ref.host}:{ref.brick} holds {brick.capacity} bytes, not {ref.capacity}"
            )
    if buf.request.capacity > buf.allocation.size:
        raise AdminError(
            f"capacity {buf.request.capacity} is more than its bricks hold ({buf.allocation.size})"
        )
    if buf.request.swap > buf.request.capacity:
        raise AdminError(
            f"swap {buf.request.swap} is more than the capacity {buf.request.capacity}"
        )
