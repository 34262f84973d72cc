"""DAOS 2.6 value grammars and access rules, as the stand-ins in daos_tools.py check them.

Each function names the DAOS source it follows (paths in daos-stack/daos at tag v2.6.5).
Nothing here touches the site's state: these are pure checks and conversions.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import uuid

__all__ = [
    "DER",
    "der",
    "is_uuid",
    "label_ok",
    "parse_bytes",
    "si_bytes",
    "iec_bytes",
    "parse_ranks",
    "print_ranks",
    "principal_ok",
    "parse_ace",
    "ace_str",
    "ACLError",
    "acl_upsert",
    "acl_remove",
    "default_pool_acl",
    "default_cont_acl",
    "effective_perms",
    "Identity",
    "resolve_principal",
]

#: DER code -> (value, description), src/include/daos_errno.h (GURT base 1000)
DER = {
    "DER_NO_PERM": (-1001, "Operation not permitted"),
    "DER_INVAL": (-1003, "Invalid parameters"),
    "DER_EXIST": (-1004, "Entity already exists"),
    "DER_NONEXIST": (-1005, "The specified entity does not exist"),
    "DER_NOSPACE": (-1007, "No space on storage target"),
    "DER_BUSY": (-1012, "Device or resource busy"),
    "DER_MISC": (-1025, "Miscellaneous error"),
}


def der(name: str) -> str:
    """daos.Status.Error() (src/control/lib/daos/status.go): 'DER_X(-n): description'."""
    code, text = DER[name]
    return f"{name}({code}): {text}"


def is_uuid(s: str) -> bool:
    try:
        uuid.UUID(s)
    except ValueError:
        return False
    return len(s) == 36  # uuid_parse (libuuid) wants the canonical 8-4-4-4-12 form


def label_ok(label: str) -> bool:
    """daos_label_is_valid (src/include/daos_prop.h): 1-127 of [A-Za-z0-9.:_-], not a UUID."""
    return (
        0 < len(label) <= 127
        and re.fullmatch(r"[A-Za-z0-9.:_-]+", label) is not None
        and not is_uuid(label)
    )


_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "ki": 2**10,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mi": 2**20,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gi": 2**30,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "ti": 2**40,
    "tib": 2**40,
    "p": 10**15,
    "pb": 10**15,
    "pi": 2**50,
    "pib": 2**50,
    "e": 10**18,
    "eb": 10**18,
    "ei": 2**60,
    "eib": 2**60,
}


def parse_bytes(s: str) -> int:
    """go-humanize v1.0.0 ParseBytes: digits and dots, then an optional SI/IEC suffix."""
    m = re.match(r"[0-9.]*", s)
    assert m is not None  # [0-9.]* matches any string
    number, suffix = m.group(0), s[m.end() :].strip().lower()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{number}": invalid syntax') from None
    if suffix not in _UNITS:
        raise ValueError(f"unhandled size name: {suffix}")
    if value * _UNITS[suffix] >= 2.0**64:  # the result is a uint64
        raise ValueError(f"too large: {s}")
    return int(value * _UNITS[suffix])


def _humanate(n: int, base: int, units: list[str]) -> str:
    if n < 10:
        return f"{n} B"
    exp = 0
    while n >= base ** (exp + 1) and exp + 1 < len(units):
        exp += 1
    value = n / base**exp
    return f"{value:.1f} {units[exp]}" if value < 10 else f"{value:.0f} {units[exp]}"


def si_bytes(n: int) -> str:
    """humanize.Bytes (what dmg prints): '50 GB', '3.0 GB'."""
    return _humanate(n, 1000, ["B", "kB", "MB", "GB", "TB", "PB", "EB"])


def iec_bytes(n: int) -> str:
    return _humanate(n, 1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"])


def parse_ranks(s: str) -> list[int]:
    """ranklist.CreateRankSet (src/control/lib/ranklist): '0,1', '0-3', '[0-3,5]'."""
    inner = s.strip("[]")
    if not inner:
        return []
    for c in s:
        if c.isspace():
            raise ValueError("unexpected whitespace character(s)")
        if c.isalpha():
            raise ValueError("unexpected alphabetic character(s)")
    ranks: set[int] = set()
    for tok in inner.split(","):
        lo, dash, hi = tok.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f'invalid range "{tok}"')
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f'invalid range "{tok}" ({last} < {first})')
        ranks.update(range(first, last + 1))
    return sorted(ranks)


def print_ranks(ranks: list[int]) -> str:
    """The ranged form dmg prints: [0-3,5]."""
    parts, ranks = [], sorted(ranks)
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return "[" + ",".join(parts) + "]"


def principal_ok(p: str) -> bool:
    """daos_acl_principal_is_valid (src/common/acl_principal.c): 'name@' or 'name@domain'."""
    return 0 < len(p) <= 255 and re.fullmatch(r"[^@]+@[^@]*", p) is not None


SPECIAL = ("OWNER@", "GROUP@", "EVERYONE@")
#: principal type order DAOS keeps ACEs in (daos_acl_create sorts by type)
_TYPE_ORDER = {"owner": 0, "user": 1, "owner-group": 2, "group": 3, "everyone": 4}
_PERMS = "rwcdtTaAo"  # order daos_ace_to_str writes them


class ACLError(ValueError):
    """An ACE or principal string DAOS rejects (the engine answers DER_INVAL)."""


def parse_ace(s: str) -> dict:
    """daos_ace_from_str + daos_ace_is_valid (src/common/acl_util.c, acl_api.c).

    'A::OWNER@:rw', 'A::alice@:rw', 'A:G:GROUP@:r', 'A:G:staff@:rw', 'A::EVERYONE@:'.
    """
    fields = s.split(":")
    if len(fields) != 4 or len(s) > 4096:
        raise ACLError(f"invalid ACE {s!r}")
    types, flags, who, perms = fields
    if (
        not types
        or set(types) - set("AUL")
        or set(flags) - set("GSFP")
        or set(perms) - set(_PERMS)
        or not principal_ok(who)
    ):
        raise ACLError(f"invalid ACE {s!r}")
    if who in SPECIAL:
        kind = {"OWNER@": "owner", "GROUP@": "owner-group", "EVERYONE@": "everyone"}[who]
    else:
        kind = "group" if "G" in flags else "user"
    grouped = kind in ("group", "owner-group")
    alarm = bool(set(types) & set("UL"))
    if grouped != ("G" in flags) or alarm != bool(set(flags) & set("SF")):
        raise ACLError(f"invalid ACE {s!r}")
    return {
        "types": "".join(c for c in "AUL" if c in types),
        "flags": "".join(c for c in "GSFP" if c in flags),
        "kind": kind,
        "name": None if who in SPECIAL else who,
        "perms": "".join(c for c in _PERMS if c in perms),
    }


def ace_str(ace: dict) -> str:
    who = (
        ace["name"]
        or {"owner": "OWNER@", "owner-group": "GROUP@", "everyone": "EVERYONE@"}[ace["kind"]]
    )
    return f"{ace['types']}:{ace['flags']}:{who}:{ace['perms']}"


def _key(ace: dict) -> tuple:
    return _TYPE_ORDER[ace["kind"]], ace["name"] or ""


def acl_upsert(acl: list[str], entries: list[str]) -> list[str]:
    """daos_acl_add_ace: replace the entry for the same principal, else insert, kept sorted."""
    aces = {_key(a): a for a in map(parse_ace, acl)}
    for a in map(parse_ace, entries):
        aces[_key(a)] = a
    return [ace_str(aces[k]) for k in sorted(aces)]


def acl_remove(acl: list[str], principal: str) -> list[str]:
    """daos_acl_principal_from_str + daos_acl_remove_ace: 'u:name@', 'g:name@', 'OWNER@' ...

    Raises ACLError (DER_INVAL) for a malformed principal, KeyError (DER_NONEXIST) when the
    ACL has no entry for it.
    """
    specials = {"OWNER@": "owner", "GROUP@": "owner-group", "EVERYONE@": "everyone"}
    if principal in specials:
        key = (_TYPE_ORDER[specials[principal]], "")
    elif principal[:2] in ("u:", "g:") and principal_ok(principal[2:]):
        key = (_TYPE_ORDER["user" if principal[0] == "u" else "group"], principal[2:])
    else:
        raise ACLError(f"invalid principal {principal!r}")
    kept = [a for a in acl if _key(parse_ace(a)) != key]
    if len(kept) == len(acl):
        raise KeyError(principal)
    return kept


def default_pool_acl() -> list[str]:
    """ds_sec_alloc_default_daos_pool_acl (src/security/srv_acl.c)."""
    return ["A::OWNER@:rw", "A:G:GROUP@:rw"]


def default_cont_acl() -> list[str]:
    """ds_sec_alloc_default_daos_cont_acl: owner everything, owner-group rwtT."""
    return ["A::OWNER@:rwdtTaAo", "A:G:GROUP@:rwtT"]


class Identity:
    """Who a client call runs as, as daos_agent builds its AUTH_SYS credential: the user's
    name and every group the user database gives it (not just the process's groups)."""

    def __init__(self, uid: int, gid: int):
        self.uid, self.gid = uid, gid
        self.user = pwd.getpwuid(uid).pw_name
        self.principal = self.user + "@"
        gids = set(os.getgrouplist(self.user, gid))
        self.groups = sorted(grp.getgrgid(g).gr_name + "@" for g in gids)
        self.group = grp.getgrgid(gid).gr_name + "@"


def effective_perms(acl: list[str], owner: str, owner_group: str, who: Identity) -> str:
    """calculate_acl_perms (src/security/acl.c): owner entry, then the named user, then the
    union of every matching group entry (owner-group included), then EVERYONE@."""
    aces = [parse_ace(a) for a in acl]

    def find(kind, name=None):
        return next((a["perms"] for a in aces if a["kind"] == kind and a["name"] == name), None)

    if who.principal == owner and (p := find("owner")) is not None:
        return p
    if (p := find("user", who.principal)) is not None:
        return p
    found = [find("owner-group")] if owner_group in who.groups else []
    found += [find("group", g) for g in who.groups]
    found = [p for p in found if p is not None]
    if found:
        return "".join(c for c in _PERMS if any(c in p for p in found))
    return find("everyone") or ""


def resolve_principal(principal: str, group: bool) -> bool:
    """Whether 'name@' names a user (or group) in this machine's user database."""
    name = principal.split("@", 1)[0]
    try:
        (grp.getgrnam if group else pwd.getpwnam)(name)
    except KeyError:
        return False
    return True
