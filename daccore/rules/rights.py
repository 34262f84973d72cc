"""Who acts as root in dac: root, and the members of the config's `admin_group`, for every
permission check (never for ownership: what an admin creates is theirs). Standard library
only: dac-bbstat (inside Slurm's 2 s), the user service and dacctl's admin commands all ask
here."""

from __future__ import annotations

import grp
import os
import pwd
from typing import Iterable

__all__ = ["rights", "groups_of"]


def rights(uid: int, groups: Iterable[int], admin_group: str) -> int:
    """The uid dac's permission checks see for a caller: 0 for root and for a member of
    `admin_group` (by any of its groups), else the caller's own."""
    if uid == 0 or not admin_group:
        return uid
    try:
        gid = grp.getgrnam(admin_group).gr_gid
    except KeyError:
        return uid  # a group this machine does not know has no members here
    return 0 if gid in set(groups) else uid


def groups_of(uid: int, gid: int) -> list[int]:
    """`gid` and the groups the system lists `uid` in; a user unknown to passwd has `gid`
    alone."""
    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except (KeyError, OSError):
        return [gid]
