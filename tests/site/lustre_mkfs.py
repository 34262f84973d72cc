"""Stand-in for mkfs.lustre: format an MGS, MDT or OST (rules in lustre_tools.py).

The checks run in mkfs_lustre.c's order: parse_opts_early (help, version, backend, devices),
parse_opts (option values, in argv order), then main (target type, index, --mgsnode, --fsname,
the device). Messages and exit statuses are the real tool's, including its closing
"mkfs.lustre: exiting with N (strerror)" line.
"""

from __future__ import annotations

import os
import re
from typing import Any

from disk_state import busy, device
from gnu_getopt import OptionError, parse
from lnet import BadNid, format_nodes, parse_nodes
from lustre_model import VERSIONS, fsname_error, lustre_of, max_index, release, resolver, svname
from sitelib import Refused, Site

__all__ = ["mkfs_lustre"]

_MKFS = [
    "skipmmp",
    "B|backfs-mount-opts=",
    "f|failnode|failover=",
    "G|mgs",
    "h|help",
    "i|index=",
    "L|fsname=",
    "m|mgsnode|mgsnid=",
    "n|dryrun",
    "N|nomgs",
    "o|mountfsoptions=",
    "p|param=",
    "q|quiet",
    "R|replace",
    "s|servicenode=",
    "t|network=",
    "u|comment=",
    "U|force-nohostid",
    "v|verbose",
    "V|version",
    "b|backfstype=",
    "c|stripe-count-hint=",
    "d|device-size=",
    "k|mkfsoptions=",
    "M|mdt",
    "O|ost",
    "r|reformat",
]
_USAGE = (
    "usage: mkfs.lustre <target type> --backfstype=ldiskfs --fsname=<filesystem name>\n"
    "\t--index=<target index> [options] <device>"
)


def _exit(message: str, rc: int, fatal: bool = False) -> Refused:
    """mkfs.lustre's failure: the message, then its closing "exiting with" line."""
    head = f"\nmkfs.lustre FATAL: {message}" if fatal else f"mkfs.lustre: {message}"
    return Refused(f"{head}\nmkfs.lustre: exiting with {rc} ({os.strerror(rc)})", rc, whole=True)


def _index(text: str, limit: int) -> int:
    """--index as strtoul reads it (base 16 after "0x"), truncated to the 32-bit field."""
    pattern = (
        r"\s*[+-]?0[xX][0-9a-fA-F]+"
        if text.startswith("0x") and len(text) > 1
        else r"\s*[+-]?[0-9]*"
    )
    if not re.fullmatch(pattern, text):
        raise _exit(f"wrong index {text}. Target index must be decimal or hexadecimal.", 1)
    digits = text.strip().lstrip("+-")
    value = int(digits, 0 if digits.startswith("0x") else 10) if digits else 0
    value = (-value if text.strip().startswith("-") else value) & 0xFFFFFFFF
    if value > limit:
        raise _exit(f"wrong index {value}. Target index must be less than {limit + 1}.", 1)
    return value


def mkfs_lustre(site: Site, args: list[str]) -> int:
    """`mkfs.lustre --mgs|--mdt|--ost --fsname=F --index=I --mgsnode=NID --reformat DEVICE`."""
    chosen = release(site)
    if not args:
        raise Refused(_USAGE, 22, whole=True)
    if (
        chosen != "master"
        and args[-1].startswith("-")
        and not (chosen == "2.16" and args in (["--version"], ["-V"]))
    ):
        # the device is the last argument: main() refuses anything else before parsing
        # (v2_15_7 lustre/utils/mkfs_lustre.c:852, v2_16_1 chk_args() mkfs_lustre.c:805-823,
        # called at :842; master has no such check)
        raise Refused(_USAGE, 22, whole=True)
    try:
        options, devs = parse(args, _MKFS)
    except OptionError as e:
        # the real tool parses twice (parse_opts_early, parse_opts) and complains both times
        raise Refused(
            f"mkfs.lustre: {e}\nmkfs.lustre: {e}\nmkfs.lustre: exiting with 22 (Invalid argument)",
            22,
            whole=True,
        ) from None
    for name, value in options:  # parse_opts_early: these act before anything else
        if name == "backfstype" and value not in ("ldiskfs", "zfs"):
            raise Refused(f"invalid backend filesystem type {value}")
        if name == "help":
            print(_USAGE)
            return 1
        if name == "version":
            print(f"mkfs.lustre {VERSIONS[chosen]}")
            return 0
    if not devs:
        raise Refused(
            "\nmkfs.lustre FATAL: Not enough arguments - device name or pool/dataset "
            "name not specified.",
            22,
            whole=True,
        )
    if len(devs) > 1:
        raise Refused(
            "Only one device is allowed for backfstype ldiskfs, but multiple devices "
            "are specified: " + " ".join(devs),
            22,
        )
    if ("backfstype", "zfs") in options:
        raise Refused("this site models ldiskfs targets only, not --backfstype=zfs")
    target = _target_options(site, options, max_index(chosen))
    _check_target(target, devs[0])
    path = os.path.abspath(devs[0])
    if not os.path.exists(path):  # osd_prepare_lustre(), even for a dry run
        raise Refused(
            f"mkfs.lustre: {devs[0]} apparently does not exist\n\n"
            "mkfs.lustre FATAL: unable to prepare backend (2)\n"
            "mkfs.lustre: exiting with 2 (No such file or directory)",
            2,
            whole=True,
        )
    if target["dryrun"]:
        print(
            f"   Permanent disk data:\nTarget:     {target['svname']}\nexiting before disk write."
        )
        return 0
    with site.state() as state:
        _check_device(state, site.host, devs[0], target["reformat"])
        lustre = state.setdefault("lustre", {})
        lustre["formats"] = lustre.get("formats", 0) + 1
        record = {
            k: target[k]
            for k in ("fsname", "kinds", "index", "svname", "mgsnode", "replace", "params")
        }
        record["uuid"] = lustre["formats"]
        if "mgs" in target["kinds"]:
            record["mgs_db"] = {}
        device(state, site.host, path)["fs"] = {"type": "ext4", "lustre": record}
    print(
        f"\n   Permanent disk data:\nTarget:     {target['svname']}\n"
        f"Index:      {target['index'] if target['index'] is not None else 'unassigned'}\n"
        f"Lustre FS:  {target['fsname']}\nMount type: ldiskfs\n"
        f"Parameters: {' '.join(target['params'])}"
    )
    return 0


def _target_options(site: Site, options, limit: int) -> dict:
    """The second pass (parse_opts): option values in argv order, as the real tool checks them."""
    t: dict[str, Any] = {
        "kinds": [],
        "fsname": "",
        "index": None,
        "mgsnode": [],
        "params": [],
        "replace": False,
        "reformat": False,
        "dryrun": False,
        "failover": None,
    }
    for name, value in options:
        if name in ("failnode", "servicenode"):
            if t["failover"] not in (None, name):
                raise _exit(f"{name} cannot use with --{t['failover']}", 1)
            t["failover"] = name
            t["params"].append(f"failover.node={format_nodes(_nids(site, value))}")
        elif name in ("mgs", "mdt", "ost") and name not in t["kinds"]:
            t["kinds"].append(name)
        elif name == "nomgs" and "mgs" in t["kinds"]:
            t["kinds"].remove("mgs")
        elif name == "index":
            t["index"] = _index(value, limit)
        elif name == "fsname":
            problem = fsname_error(value)
            if problem:
                raise _exit(problem, 1)
            t["fsname"] = value
        elif name == "mgsnode":
            t["mgsnode"] += _nids(site, value)
        elif name == "network" and not {"mdt", "ost"} & set(t["kinds"]):
            raise Refused(f"'--network' only valid for MDT,OST\n{_USAGE}")
        elif name == "stripe-count-hint":
            if "mdt" not in t["kinds"]:
                raise Refused(f"'--stripe-count-hint' only valid for MDT\n{_USAGE}")
            count = re.match(r"\s*([+-]?\d+)", value)  # atol(): 0 when not a number
            if not count or int(count[1]) <= 0:
                raise _exit(f"bad stripe count {value}", 1)
        elif name == "param":
            t["params"].append(value)
        elif name in ("replace", "reformat", "dryrun"):
            t[name] = True
    if t["mgsnode"]:
        t["params"].append(f"mgsnode={format_nodes(t['mgsnode'])}")
    return t


def _nids(site: Site, text: str) -> list[list[str]]:
    try:
        return parse_nodes(text, resolver(site))
    except BadNid as e:
        raise Refused(
            f"mkfs.lustre: Unsupported NID '{e}': rc = Unknown error -22.\n"
            f"mkfs.lustre: Can't parse NID '{e}'\n"
            "mkfs.lustre: exiting with 1 (Operation not permitted)",
            1,
            whole=True,
        ) from None


def _check_target(t: dict, dev: str) -> None:
    """The checks main() makes once the options are read, in its order."""
    kinds = t["kinds"]
    if not kinds:
        raise _exit("must set target type: MDT,OST,MGS", 22, fatal=True)
    if "ost" in kinds and len(kinds) > 1:
        raise _exit("OST type is exclusive with MDT,MGS", 22, fatal=True)
    if kinds == ["mgs"] and t["index"] is not None:
        # badopt() then `goto out` with ret still 0: the real tool writes nothing and exits 0
        raise Refused(f"'--index' only valid for MDT,OST\n{_USAGE}", 0)
    if t["index"] is None and {"mdt", "ost"} & set(kinds):
        print(
            f"warning: {dev}: for Lustre 2.4 and later, the target index must be specified "
            "with --index"
        )
        if "mdt" in kinds:
            t["index"] = 0
    if "mgs" not in kinds and not t["mgsnode"]:
        raise _exit(
            "Must specify --mgs or --mgsnode" if "mdt" in kinds else "Must specify --mgsnode",
            22,
            fatal=True,
        )
    if {"mdt", "ost"} & set(kinds) and not t["fsname"]:
        raise _exit("Must specify --fsname for MDT/OST device", 22, fatal=True)
    t["mgsnode"] = t["mgsnode"] or None
    t["svname"] = svname(t["fsname"], kinds, t["index"])


def _check_device(state: dict, host: str, given: str, reformat: bool) -> None:
    """What mkfs.lustre checks on the device itself before it writes."""
    path = os.path.abspath(given)
    if path in {entry.get("device") for entry in state.get("mounts", {}).get(host, [])}:
        raise Refused(f"{given}: is currently mounted, exiting without any change", 17, whole=True)
    if busy(state, host, path):  # a partition of this disk is mounted: mke2fs's O_EXCL fails
        raise Refused(
            f"mke2fs: {given} is apparently in use by the system; will not make a "
            f"filesystem here!\n\nmkfs.lustre FATAL: Unable to build fs {given} (256)"
            f"\n\nmkfs.lustre FATAL: mkfs failed 256",
            1,
            whole=True,
        )
    if not reformat and lustre_of(state, host, path):
        raise _exit(
            f"Device {given} was previously formatted for lustre. Use --reformat to "
            "reformat it, or tunefs.lustre to modify.",
            1,
            fatal=True,
        )
