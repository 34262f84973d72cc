"""What `dacctl hosts`, `buffers` and `show` print: plain dicts (their --json form) built by
pure functions from records already read, so every rule here is tested without etcd.

Who sees what: a user sees only the buffers they own; root sees every one (`visible`). The
config's `admin_group` (daccore/settings/config.py) makes its members root here:
`daccore.rules.rights.rights` maps them to uid 0 before these functions are called.
"""

from __future__ import annotations

import pwd
import time
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable

from daccore.errors import NotFound
from daccore.records import buffer_doc
from daccore.records.buffer_doc import STATES

if TYPE_CHECKING:
    from daccore.records.models import Buffer, Status
    from daccore.rules.inventory import Inventory
    from daccore.settings.cache import Json

__all__ = [
    "visible",
    "buffer_state",
    "STATES",
    "user_name",
    "resolve_uid",
    "age",
    "host_rows",
    "buffer_rows",
    "buffer_detail",
    "shorten",
    "sort_names",
]


def visible(uid: int, buf: Buffer) -> bool:
    """The rule of `dacctl status`: the owner sees their buffer, admins (uid 0 as
    daccore.services.admin.rights gives it) see all."""
    return uid in (0, buf.owner_uid)


def buffer_state(buf: Buffer, statuses: dict[str, Status]) -> str:
    """One word for a buffer across its hosts (`STATES`): `daccore.records.buffer_doc.state`,
    the one every view shows, "error" only for a failure at the spec's current generation."""
    docs = {h: s.model_dump(mode="json", include=_DECIDING) for h, s in statuses.items()}
    return buffer_doc.state(buf.allocation.hosts, docs, buf.generation)


#: what of a status decides the buffer's state
_DECIDING = {"state", "generation", "error"}


def user_name(uid: int) -> str:
    """The user's login name, or the uid as text when the passwd database has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def resolve_uid(user: str) -> int:
    """A uid from a login name or a number."""
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise NotFound(f"no user named '{user}' (give a login name or a uid)") from None


def age(seconds: float) -> str:
    """`45s`, `12m`, `3h`, `2d`: the largest whole unit."""
    s = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def sort_names(names: Iterable[str]) -> list[str]:
    """Job buffers (numbers) in numeric order first, then persistent buffers by name."""
    return sorted(names, key=lambda n: (0, int(n), "") if n.isdigit() else (1, 0, n))


def shorten(names: list[str], limit: int = 4) -> str:
    """`7, 9, pbuf +3 more`: at most `limit` names, for a table cell."""
    if len(names) <= limit:
        return ", ".join(names) or "-"
    return f"{', '.join(names[:limit])} +{len(names) - limit} more"


def host_rows(inv: Inventory, lease_ages: dict[str, float] | None = None) -> list[Json]:
    """Per storage host, from an inventory read with `claim_owners=True`: its state (up,
    drained or down; a host is down when its alive key is gone), seconds since its dacd last
    renewed its lease (Store.lease_ages), and per pool its bricks, how many no buffer holds
    (`free`, whatever the host's state: only an up host's free bricks take new buffers) and
    the buffers on it."""
    lease_ages = lease_ages or {}
    rows = []
    for name in sorted(inv.hosts):
        h = inv.hosts[name]
        held = {
            b.name: inv.claimed[(name, b.name)] for b in h.bricks if (name, b.name) in inv.claimed
        }
        bricks = Counter(b.pool for b in h.bricks)
        claimed = Counter(b.pool for b in h.bricks if b.name in held)
        state = (
            ("down,drained" if h.drained else "down")
            if not h.alive
            else ("drained" if h.drained else "up")
        )
        rows.append(
            {
                "name": name,
                "state": state,
                "alive": h.alive,
                "drained": h.drained,
                "lease_age": lease_ages.get(name),
                "pools": {
                    p: {"bricks": n, "free": n - claimed[p], "claimed": claimed[p]}
                    for p, n in sorted(bricks.items())
                },
                "buffers": sort_names(set(held.values())),
                "warnings": h.warnings,
            }
        )
    return rows


def buffer_rows(
    buffers: Iterable[Buffer],
    statuses: Callable[[str], dict[str, Status]],
    uid: int,
    *,
    owner_uid: int | None = None,
    state: str | None = None,
    pool: str | None = None,
    now: float | None = None,
    names: Callable[[int], str] = user_name,
) -> list[Json]:
    """One row per buffer that user `uid` may see and that matches every filter given;
    `statuses(name)` reads a buffer's statuses, for the buffers the owner and pool filters
    keep only."""
    now = time.time() if now is None else now
    rows: list[Json] = []
    for buf in buffers:
        if (
            not visible(uid, buf)
            or owner_uid not in (None, buf.owner_uid)
            or pool not in (None, buf.request.pool)
        ):
            continue
        summary = buffer_state(buf, statuses(buf.name))
        if state not in (None, summary):
            continue
        rows.append(
            {
                "name": buf.name,
                "owner_uid": buf.owner_uid,
                "owner": names(buf.owner_uid),
                "job": buf.job_id,
                "persistent": buf.persistent,
                "state": summary,
                "desired_state": buf.desired_state.value,
                "size": buf.allocation.size,
                "pool": buf.request.pool,
                "hosts": buf.allocation.hosts,
                "created_at": buf.created_at,
                "age_seconds": max(now - buf.created_at, 0.0) if buf.created_at else None,
            }
        )
    order = {n: i for i, n in enumerate(sort_names(r["name"] for r in rows))}
    return sorted(rows, key=lambda r: order[r["name"]])


def buffer_detail(
    buf: Buffer,
    statuses: dict[str, Status],
    now: float | None = None,
    names: Callable[[int], str] = user_name,
) -> Json:
    """Everything about one buffer: its spec as stored, the summary state and, per host of
    its allocation, the status as stored (None before that host's dacd first wrote one)."""
    now = time.time() if now is None else now
    return {
        "buffer": buf.model_dump(mode="json"),
        "owner": names(buf.owner_uid),
        "state": buffer_state(buf, statuses),
        "size": buf.allocation.size,
        "age_seconds": max(now - buf.created_at, 0.0) if buf.created_at else None,
        "statuses": {
            h: statuses[h].model_dump(mode="json") if h in statuses else None
            for h in buf.allocation.hosts
        },
    }
