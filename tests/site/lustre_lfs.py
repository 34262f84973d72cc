"""Stand-in for lfs: setstripe (rules in lustre_tools.py); other lfs commands are not modelled.

A layout set on a directory or new file is recorded under the path inside the filesystem, so
a setstripe through a subdirectory mount shows through the root mount too:

    state["lustre"]["layouts"]["<fsname>:/<path in fs>"] = {"host", "components": [
        {"end": bytes | "EOF" | None, "stripe_count", "stripe_size", "stripe_index",
         "pattern": "raid0" | "mdt" | "overstriping", "osts": [...]}]}
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from gnu_getopt import OptionError, parse
from lustre_model import MAX_INDEX, client_mount_at, lustre_of, mounted_targets
from sitelib import Refused, Site

__all__ = ["lfs"]

_SETSTRIPE = [
    "comp-add|component-add",
    "comp-del|component-del",
    "comp-flags|component-flags=",
    "comp-set|component-set",
    "no-verify",
    "flags=",
    "foreign=?",
    "mirror-id=",
    "mode=",
    "copy=",
    "restripe",
    "stats",
    "stats-interval=",
    "files-from=",
    "lustre-dir=",
    "0|null",
    "A|auto-stripe",
    "b|block",
    "c|stripe-count|stripe_count|mdt-count=",
    "C|overstripe-count|mdt-overcount=",
    "d|delete|destroy|directory",
    "D|non-direct",
    "E|comp-end|component-end=",
    "ec|ec-stripe-count=",
    "ec-expert=",
    "f|file=",
    "F|fid",
    "h|help",
    "H|mdt-hash=",
    "i|stripe-index|stripe_index=",
    "I|comp-id|component-id=",
    "K|auto-cap=",
    "L|layout=",
    "m|mdt|mdt-index|mdt_index=",
    "M|min-free=",
    "n|non-block",
    "N|mirror-count=?",
    "o|ost|ost-list|ost_list=",
    "p|pool=",
    "S|stripe-size|stripe_size=",
    "v|verbose",
    "W|bandwidth-limit=",
    "x|xattr=",
    "X|max-free=",
    "y|yaml=",
    "z|ext-size|extension-size=",
    "clear-fixed",
]
_MODELLED = {
    "stripe-count",
    "overstripe-count",
    "stripe-size",
    "stripe-index",
    "comp-end",
    "layout",
    "pool",
    "delete",
    "ost",
    "help",
}
_LFS_COMMANDS = {
    "getstripe",
    "setdirstripe",
    "mkdir",
    "getdirstripe",
    "find",
    "df",
    "check",
    "osts",
    "mdts",
    "quota",
    "setquota",
    "mirror",
    "migrate",
    "path2fid",
    "fid2path",
    "data_version",
    "hsm_state",
    "hsm_set",
    "hsm_archive",
    "swap_layouts",
    "pool_list",
    "ladvise",
    "heat_get",
    "pcc",
    "project",
    "rmfid",
    "getname",
    "rm_entry",
    "changelog",
    "changelog_clear",
    "somsync",
    "help",
    "version",
}
_POOL_IGNORED = {"", "none", "ignore", "inherit"}
MIN_STRIPE = 64 * 1024  # LOV_MIN_STRIPE_SIZE
MAX_STRIPE_COUNT = 2000  # LOV_MAX_STRIPE_COUNT


class _Usage(Exception):
    """A setstripe usage error (CMD_HELP: the message, the command's help, exit status 4)."""


def _size(text: str) -> int | None:
    """llapi_parse_size(): a number, optional fraction and a one-letter unit (b = 512 bytes)."""
    match = re.fullmatch(
        r"(0[xX][0-9a-fA-F]+|\d+)(?:\.(\d+))?(?:([bBcCkKmMgGtTpPeE])[iIbB]?)?", text
    )
    if not match:
        return None
    unit = (
        1
        << {"b": 9, "c": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60}[
            (match.group(3) or "c").lower()
        ]
    )
    fraction = int(match.group(2) or 0) * unit // 10 ** len(match.group(2) or "")
    size = int(match.group(1), 0) * unit + fraction
    return size * 1024 if size < 4096 else size  # "assume units of KB if too small"


def _integer(text: str) -> int | None:
    return int(text, 0) if re.fullmatch(r"[+-]?(0[xX][0-9a-fA-F]+|\d+)", text) else None


def lfs(site: Site, args: list[str]) -> int:
    """`lfs setstripe [-c N] [-S SIZE] [-i IDX] [-E END ...] [-L mdt|raid0] [-d] PATH...`."""
    if not args:
        raise Refused("this site does not model interactive lfs: give a command")
    if args[0] != "setstripe":
        if args[0] in _LFS_COMMANDS:
            raise Refused(f"this site does not model 'lfs {args[0]}'")
        raise Refused(f"'{args[0]}' is not a valid command. See 'lfs --list-commands'.")
    try:
        layout, delete, paths = _layout(args[1:])
    except _Usage as e:
        raise Refused(f"lfs setstripe: {e}", 4, whole=True) from None
    with site.state() as state:
        failures = [f for f in (_apply(site, state, path, layout, delete) for path in paths) if f]
    if failures:  # each path is tried; the first failure's errno is the exit status
        raise Refused("\n".join(message for message, _ in failures), failures[0][1], whole=True)
    return 0


def _layout(args: list[str]) -> tuple[list[dict], bool, list[str]]:
    """The components the options describe, whether -d was given, and the paths."""
    try:
        options, paths = parse(args, _SETSTRIPE)
    except OptionError as e:
        raise _Usage(str(e)) from None
    components: list[dict[str, Any]] = [
        {
            "end": None,
            "stripe_count": None,
            "stripe_size": None,
            "stripe_index": None,
            "pattern": "raid0",
            "osts": [],
            "pool": None,
        }
    ]
    delete = False
    for name, given in options:
        value = given or ""  # None only for an option that takes no value
        current = components[-1]
        if name not in _MODELLED:
            raise Refused(f"lfs setstripe: this site does not model --{name}", 1, whole=True)
        if name == "help":
            raise _Usage(
                "usage: setstripe [--component-end|-E COMP_END] [--stripe-count|-c "
                "STRIPE_COUNT] [--stripe-index|-i START_OST_IDX] [--stripe-size|-S "
                "STRIPE_SIZE] [--layout|-L PATTERN] FILENAME|DIRECTORY"
            )
        if name in ("stripe-count", "overstripe-count"):
            count = _integer(value)
            low = -32 if name == "overstripe-count" else -1
            if count is None or not low <= count <= MAX_STRIPE_COUNT:
                raise _Usage(f"invalid stripe count '{value}'")
            if name == "overstripe-count":
                if current["pattern"] == "mdt":
                    raise _Usage("-C|--overstripe-count incompatible with DoM layout")
                current["pattern"] = "overstriping"
            current["stripe_count"] = count
        elif name == "stripe-size":
            size = _size(value)
            if size is None or size % MIN_STRIPE:
                raise _Usage(f"invalid stripe size '{value}'")
            current["stripe_size"] = size
        elif name == "stripe-index":
            index = _integer(value)
            if index is None or not -1 <= index <= MAX_INDEX:
                raise _Usage(f"invalid stripe offset '{value}'")
            current["stripe_index"] = index
        elif name == "comp-end":
            _component_end(components, value)
        elif name == "layout":
            _pattern(components, value)
        elif name == "pool":
            if value not in _POOL_IGNORED:
                raise Refused(
                    f"lfs setstripe: this site models no OST pools ('{value}')", 1, whole=True
                )
        elif name == "ost":
            current["osts"] = _ost_list(value)
        elif name == "delete":
            delete = True
    if not paths:
        raise _Usage("FILE must be specified")
    if delete and len(options) > 1:
        raise _Usage("cannot specify -d with -c, -C, -E, -i, -L, -o, -p or -S options")
    _verify(components)
    return components, delete, paths


def _component_end(components: list[dict], value: str) -> None:
    current = components[-1]
    if current["end"] is not None:  # an -E after an -E starts the next component
        previous = current
        current = dict(
            previous, end=None, stripe_count=None, stripe_index=None, pattern="raid0", osts=[]
        )
        components.append(current)
    end: int | str | None
    if value.lower() in ("-1", "eof"):
        end = "EOF"
    else:
        end = _size(value)
        if end is None or end % MIN_STRIPE:
            raise _Usage(f"invalid component end '{value}'")
    if len(components) > 1:
        before = components[-2]["end"]
        if before == "EOF" or (end != "EOF" and end <= before):
            raise _Usage("invalid layout")
    current["end"] = end


def _pattern(components: list[dict], value: str) -> None:
    current = components[-1]
    if value == "mdt":
        if len(components) > 1:
            raise Refused("error: 'mdt' layout can be only the first one", errno.EINVAL, whole=True)
        if current["end"] not in (None, "EOF") and current["end"] > 1 << 30:
            raise Refused("error: 'mdt' layout size is too big", errno.EFBIG, whole=True)
        current["pattern"], current["stripe_size"] = "mdt", None
    elif value != "raid0":
        raise Refused(
            f"error: layout '{value}' is unknown, supported layouts are: 'mdt', 'raid0'",
            errno.EINVAL,
            whole=True,
        )


def _ost_list(value: str) -> list[int]:
    indexes: list[int] = []
    for part in value.strip("[]").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise _Usage(f"invalid OST target(s) '{value}'")
        indexes += range(int(low), int(high if dash else low) + 1)
    return indexes


def _verify(components: list[dict]) -> None:
    """llapi_stripe_param_verify(): limits checked after the options are read (EINVAL)."""
    for component in components:
        size = component["stripe_size"] or 0
        if size >= 4 << 30:
            raise Refused(
                f"lfs setstripe: error: stripe size '{size}' over 4GB limit",
                errno.EINVAL,
                whole=True,
            )
    if components[0]["pattern"] == "mdt" and components[0]["end"] is None:
        raise Refused(
            "lfs setstripe: Invalid pattern: '-L mdt', must be specified with -E",
            errno.EINVAL,
            whole=True,
        )


def _apply(site: Site, state: dict, path: str, layout: list[dict], delete: bool):
    """Set the layout on one path; (message, errno) when the real call would fail."""
    prefix = "lfs setstripe: "
    exists = os.path.lexists(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not exists and not os.path.isdir(parent):
        return f"{prefix}unable to open '{path}': No such file or directory (2)", errno.ENOENT
    held = client_mount_at(state, site.host, path)
    if not exists:  # setstripe creates a new file (open O_CREAT) before setting its layout
        open(path, "a").close()
    if held is None:
        return f"{prefix}setstripe error for '{path}': Inappropriate ioctl for device", errno.ENOTTY
    entry, inside = held
    if not os.path.isdir(path) and exists:
        return f"{prefix}setstripe error for '{path}': stripe already set", errno.EEXIST
    if "ro" in entry.get("options", []):
        return f"{prefix}setstripe error for '{path}': Read-only file system", errno.EROFS
    osts = _mounted_osts(state, entry)
    for component in layout:
        start = component["stripe_index"]
        wanted = component["osts"] + ([start] if start is not None and start >= 0 else [])
        if any(index not in osts for index in wanted):  # lod refuses a missing OST
            return f"{prefix}setstripe error for '{path}': Invalid argument", errno.EINVAL
    layouts = state.setdefault("lustre", {}).setdefault("layouts", {})
    key = f"{entry['fsname']}:{inside}"
    if delete:
        layouts.pop(key, None)
    else:
        layouts[key] = {"host": site.host, "components": layout}
    return None


def _mounted_osts(state: dict, entry: dict) -> set[int]:
    """Indexes of the client's filesystem's OSTs that are registered and mounted now."""
    mgs = lustre_of(state, *entry["mgs"]) or {}
    known = mgs.get("mgs_db", {}).get(entry["fsname"], {})
    running = {info["uuid"] for _, _, info in mounted_targets(state)}
    return {
        int(name[-4:], 16) for name, uuid in known.items() if "-OST" in name and uuid in running
    }
