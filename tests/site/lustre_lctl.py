"""Stand-in for lctl: ping, list_nids, set_param and erase_lcfg (rules in lustre_tools.py).

Parameters set are recorded in state["lustre"]["params"] as {"host", "param", "value",
"permanent"}. A parameter without -P must exist on this host now: the devices a host has are
derived from what it mounts (a client of fs1 has llite.fs1-<instance>, osc.fs1-OST0000-osc-
<instance>, mdc..., an OST host obdfilter.fs1-OST0000, ...), and the name is matched against
them with glob patterns, as llapi_param_get_paths() does against /sys and /proc.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import sys
from typing import Any

from disk_state import mounts
from gnu_getopt import OptionError, parse
from lnet import BadNid, parse_nid
from lustre_model import (
    BRW_DEFAULT,
    MODRPCS_DEFAULT,
    host_nids,
    lustre_of,
    mounted_targets,
    release,
    resolver,
)
from sitelib import Refused, Site

__all__ = ["lctl", "PARAMS"]

#: lctl's command names (lustre/utils/lctl.c cmdlist); those without a handler here are real
#: commands this site does not model
COMMANDS = set(
    """abort_recovery abort_recovery_mdt activate add_interface add_peer add_route
add_uuid apply_yaml attach barrier barrier_freeze barrier_rescan barrier_stat barrier_thaw
cfg_device changelog changelog_deregister changelog_register cleanup clear clear_conf
conf_param conn_list create deactivate debug_daemon debug_file debug_kernel debug_list
del_interface del_ost del_peer del_route del_uuid destroy detach device device_list df
disconnect dk dl erase_lcfg fail filter find_param fork_lcfg get_param getattr getobjversion
help help_param interface_list lcfg_clear lcfg_erase lcfg_fork lfsck lfsck_query lfsck_start
lfsck_stop list_nids list_param llog llog_cancel llog_catlist llog_check llog_info llog_print
llog_remove lookup lqa lustre_build_version mark modules mynid net net_delay net_delay_add
net_delay_del net_delay_list net_delay_reset net_drop net_drop_add net_drop_del net_drop_list
net_drop_reset network nodemap notransno pcc peer_list ping pool_add pool_destroy pool_list
pool_new pool_remove push readonly recover replace_nids route_list set_param set_route setattr
setup show show_route snapshot test_brw version which_nid""".split()
)

MiB = 1 << 20
#: parameter type -> name -> value rule; the rules are the kernel's *_store() checks:
#: uint (kstrtouint), int, bool (kstrtobool), size (sysfs_memparse; default unit given),
#: (uint, lo, hi) ranges (ERANGE outside), rpc (max_rpc_store), brw (ofd brw_size_store)
PARAMS: dict[str, dict[str, Any]] = {
    "osc": {
        "max_pages_per_rpc": "rpc",
        "max_rpcs_in_flight": ("uint", 1, 256),
        "max_dirty_mb": "size:M",
        "checksums": "bool",
        "short_io_bytes": "size:B",
        "idle_timeout": "uint",
        "grant_shrink": "bool",
        "resend_count": "uint",
        "active": "bool",
        "checksum_type": (
            "choice",
            "crc32",
            "adler",
            "crc32c",
            "t10ip512",
            "t10ip4K",
            "t10crc512",
            "t10crc4K",
        ),
    },
    "mdc": {
        "max_rpcs_in_flight": ("uint", 1, 512),
        "max_mod_rpcs_in_flight": ("uint", 1, 512),
        "max_pages_per_rpc": "rpc",
        "checksums": "bool",
        "active": "bool",
        "idle_timeout": "uint",
    },
    "llite": {
        "checksum_pages": "bool",
        "checksums": "bool",
        "max_read_ahead_mb": "size:M",
        "max_read_ahead_per_file_mb": "size:M",
        "max_read_ahead_whole_mb": "size:M",
        "max_cached_mb": "size:M",
        "statahead_max": "uint",
        "statahead_agl": "bool",
        "lazystatfs": "bool",
        "xattr_cache": "bool",
        "fast_read": "bool",
        "stats_track_pid": "uint",
        "file_heat": "bool",
    },
    "ldlm": {
        "lru_size": "lru",
        "lru_max_age": "uint",
        "early_lock_cancel": "bool",
        "dirty_age_limit": "uint",
        "max_parallel_ast": "uint",
        "contention_seconds": "uint",
    },
    "obdfilter": {
        "brw_size": "brw",
        "readcache_max_filesize": "size:B",
        "read_cache_enable": "bool",
        "writethrough_cache_enable": "bool",
        "sync_journal": "bool",
        "degraded": "bool",
        "grant_compat_disable": "bool",
        "precreate_batch": "uint",
        "client_cache_count": "uint",
    },
    "osd-ldiskfs": {
        "read_cache_enable": "bool",
        "writethrough_cache_enable": "bool",
        "readcache_max_filesize": "size:B",
    },
    "mdt": {
        "identity_upcall": "str",
        "enable_remote_dir": "bool",
        "dom_stripesize": "size:B",
        "commit_on_sharing": "bool",
        "enable_dir_migration": "bool",
    },
    "lod": {"stripesize": "size:B", "stripecount": "int", "qos_prio_free": ("uint", 0, 100)},
    "mgs": {},
}
#: parameters directly under the top level (lctl set_param timeout=...)
GLOBALS = {
    "timeout": "uint",
    "at_min": "uint",
    "at_max": "uint",
    "at_history": "uint",
    "ldlm_timeout": "uint",
    "jobid_var": "str",
    "jobid_name": "str",
    "debug": "str",
    "subsystem_debug": "str",
    "debug_mb": "uint",
    "max_dirty_mb": "size:M",
}
#: real parameter types this site does not model
UNMODELLED = {
    "mds",
    "ost",
    "lov",
    "lmv",
    "mgc",
    "osp",
    "mdd",
    "qmt",
    "nodemap",
    "osd-zfs",
    "health_check",
    "sptlrpc",
    "seq",
    "fld",
    "lfsck",
    "quota",
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGTPE]?)(?:i?B)?", re.IGNORECASE)


def _size(value: str, default: str) -> int | None:
    match = _SIZE.fullmatch(value)
    if not match or (match.group(2) == "" and value[-1:].upper() == "B" and default != "B"):
        return None
    unit = (match.group(2) or default).upper()
    return int(float(match.group(1)) * (1 << (10 * "BKMGTPE".index(unit))))


def value_error(rule, value: str) -> int | None:
    """The errno the kernel would give writing `value`, or None when it takes it."""
    kind = rule if isinstance(rule, str) else rule[0]
    if kind == "uint" or kind == "lru":
        if kind == "lru" and value.startswith("clear"):
            return None
        if not re.fullmatch(r"\+?\d+", value):
            return errno.EINVAL
        if isinstance(rule, tuple) and not rule[1] <= int(value) <= rule[2]:
            return errno.ERANGE
    elif kind == "int":
        return None if re.fullmatch(r"[+-]?\d+", value) else errno.EINVAL
    elif kind == "bool":
        ok = value[:1] in tuple("yYnN10") or value[:2].lower() in ("on", "of")
        return None if ok else errno.EINVAL
    elif kind == "choice":
        return None if value in rule[1:] else errno.EINVAL
    elif kind.startswith("size:"):
        return None if _size(value, kind[5:]) is not None else errno.EINVAL
    elif kind == "rpc":  # pages, or a size; its range depends on the server (_write)
        size = _size(value, "B")
        if size is None:
            return errno.EINVAL
        pages = size // 4096 if size >= MiB else size
        return None if 0 < pages <= 64 * MiB // 4096 else errno.ERANGE
    elif kind == "brw":
        size = _size(value, "M")
        if size is None or size == 0:
            return errno.EINVAL
        return None if 4096 <= size <= 64 * MiB else errno.ERANGE
    elif kind == "str":
        return None if value else errno.EINVAL
    return None


def _split(param: str) -> tuple[str, str | None, str]:
    """(type, device pattern, name) of a parameter; ldlm parameters sit under namespaces."""
    parts = param.split(".")
    if len(parts) == 1:
        return "", None, parts[0]
    if parts[0] == "ldlm" and len(parts) >= 4 and parts[1] == "namespaces":
        return "ldlm", ".".join(parts[2:-1]), parts[-1]
    if len(parts) < 3:
        return parts[0], None, parts[-1]
    return parts[0], ".".join(parts[1:-1]), parts[-1]


def params_of(chosen: str) -> dict:
    """The parameter table of a release: mdt.*.max_mod_rpcs_in_flight came with 2.16
    (v2_16_1 lustre/mdt/mdt_lproc.c:1170; 2.15 has only the mdt module's
    max_mod_rpcs_per_client, v2_15_7 lustre/mdt/mdt_handler.c:70)."""
    if chosen == "2.15":
        return PARAMS
    return {**PARAMS, "mdt": {**PARAMS["mdt"], "max_mod_rpcs_in_flight": ("uint", 1, 512)}}


def _devices(state: dict, host: str) -> dict[str, dict]:
    """The parameter devices the host has now, by type: name -> what the device belongs to
    (a client's mdc/osc: (its mount entry, the target's svname); a target's: its format)."""
    found: dict[str, dict] = {t: {} for t in PARAMS}
    for entry in mounts(state, host):
        if entry.get("kind") == "client":
            mgs = lustre_of(state, *entry["mgs"]) or {}
            names = mgs.get("mgs_db", {}).get(entry["fsname"], {})
            inst = entry["instance"]
            found["llite"][f"{entry['fsname']}-{inst}"] = entry
            for name in names:
                kind = "osc" if "-OST" in name else "mdc"
                found[kind][f"{name}-{kind}-{inst}"] = (entry, name)
                found["ldlm"][f"{name}-{kind}-{inst}"] = entry
    for owner, _entry, info in mounted_targets(state):
        if owner != host:
            continue
        name = info["svname"]
        found["osd-ldiskfs"][name] = info
        if "ost" in info["kinds"]:
            found["obdfilter"][name] = info
            found["ldlm"][f"filter-{name}_UUID"] = info
        if "mdt" in info["kinds"]:
            found["mdt"][name] = info
            found["lod"][f"{name}-mdtlov"] = info
            found["ldlm"][f"mdt-{name}_UUID"] = info
        if "mgs" in info["kinds"]:
            found["mgs"]["MGS"] = info
            found["ldlm"]["MGS"] = info
    return found


def _has_mgs(state: dict, host: str) -> bool:
    return any(
        owner == host and "mgs" in info["kinds"] for owner, _, info in mounted_targets(state)
    )


def lctl(site: Site, args: list[str]) -> int:
    """`lctl ping|list_nids|set_param|erase_lcfg ...`; other real commands are not modelled."""
    if not args:
        raise Refused("this site does not model interactive lctl: give a command")
    command, rest = args[0], args[1:]
    handlers = {
        "ping": _ping,
        "list_nids": _list_nids,
        "set_param": _set_param,
        "erase_lcfg": _erase_lcfg,
        "lcfg_erase": _erase_lcfg,
    }
    if command in handlers:
        return handlers[command](site, command, rest)
    if command in COMMANDS:
        raise Refused(f"this site does not model 'lctl {command}'")
    raise Refused(f"'{command}' is not a valid command. See 'lctl --list-commands'.")


def _ping(site: Site, command: str, args: list[str]) -> int:
    """jt_ptl_ping (v2_15_7 lustre/utils/portals.c:899, v2_16_1 portals.c:1312): `ping NID
    [TIMEOUT]`, the timeout in seconds (default 1), at most 120 (v2_15_7 :946-951, v2_16_1
    :1359-1364). 2.15 returns -1 on every failure (exit 1) and 0 after its usage line; 2.16 and
    master return -errno (EINVAL for usage, a bad NID or timeout) and print a failed ping on
    stdout (v2_16_1 :1529-1547)."""
    old = release(site) == "2.15"

    def fail(message: str, code: int, out: bool = False) -> Refused:
        if out and not old:  # 2.16's netlink path reports on stdout
            print(message)
        return Refused(message, 1 if old else code, whole=True)

    if not args:
        usage = f"usage: {command} id [timeout (secs)]"
        if old:
            print(usage, file=sys.stderr)
            return 0
        raise Refused(usage, errno.EINVAL, whole=True)
    target = args[0]
    pid, dash, rest = target.partition("-")
    text = rest if dash and pid.lstrip("uU").isdigit() else target
    try:
        nid = parse_nid(text, resolver(site))
    except BadNid:
        raise fail(f"failed to ping {target}: Invalid argument", errno.EINVAL) from None
    seconds = re.match(r"\s*([+-]?\d+)", args[1]) if len(args) > 1 else None  # atol()
    if seconds and int(seconds[1]) > 120:
        raise fail(f"Timeout {args[1]} is to large", errno.EINVAL)
    if not any(nid in host_nids(site, host) for host in site.facts["hosts"]):
        # no LNet peer answers: lnet_ping() gives -EIO
        raise fail(f"failed to ping {target}: Input/output error", errno.EIO, out=True)
    print(f"12345-0@lo\n12345-{nid}")
    return 0


def _list_nids(site: Site, command: str, args: list[str]) -> int:
    for nid in sorted(host_nids(site, site.host)):
        print(nid)
    return 0


_SET_PARAM = [
    "C|client=?",
    "d|delete",
    "F|file",
    "n|noname",
    "o|module",
    "P|perm|permanent",
    "t|threads=?",
]
_SET_PARAM_HELP = (
    "usage: set_param [--client|-C[FSNAME]] [--delete|-d] [--file|-F "
    "YAML_PARAM_FILE] [--no-name|-n] [--module|-o] [--permanent|-P] "
    "[--thread|-t[THREAD_COUNT]] PARAM1=VALUE1 [PARAM2=VALUE2 ...]"
)


def _set_param(site: Site, command: str, args: list[str]) -> int:
    try:
        options, words = parse(args, _SET_PARAM)
    except OptionError:  # set_param runs getopt with opterr = 0: only its help is printed
        raise Refused(_SET_PARAM_HELP, 4, whole=True) from None
    opts = dict(options)
    if "perm" in opts and "client" in opts:
        first = next(n for n, _ in options if n in ("perm", "client"))
        other = "C" if first == "perm" else "P"
        raise Refused(
            f"error: {command}: -{other} cannot be used with -{first[0].upper()}\n"
            + _SET_PARAM_HELP,
            4,
            whole=True,
        )
    if "file" in opts or "client" in opts:
        raise Refused("this site does not model set_param --file or --client")
    if not words:
        raise Refused(_SET_PARAM_HELP, 4, whole=True)
    if "delete" in opts and "perm" not in opts:
        print("warning: setting '-P' option with '-d'")
        opts["perm"] = None
    with site.state() as state:
        if "perm" in opts:
            _set_permanent(site, state, command, words, "delete" in opts)
            return 0
        rc, complaints = _set_now(site, state, command, words, release(site))
    # the parameters that could be set stay set; the exit status is the last parameter's
    if rc:
        raise Refused("\n".join(complaints), rc, whole=True)
    if complaints:
        print("\n".join(complaints), file=sys.stderr)
    return 0


def _check_value(command: str, param: str, value: str, rule) -> None:
    code = value_error(rule, value)
    if code:
        raise Refused(
            f"error: {command}: setting '{param.replace('.', '/')}'='{value}': {os.strerror(code)}",
            code,
            whole=True,
        )


def _set_permanent(site: Site, state: dict, command: str, words: list[str], delete: bool) -> None:
    if not _has_mgs(state, site.host):
        raise Refused(
            f"This command must be run on the MGS.\nerror: executing {command}: No such device",
            errno.ENODEV,
            whole=True,
        )
    params = state.setdefault("lustre", {}).setdefault("params", [])
    for word in words:
        param, eq, value = word.partition("=")
        kind, _, name = _split(param)
        if not delete:
            if not eq or not value:
                raise Refused(
                    f"error: executing {command}: Invalid argument", errno.EINVAL, whole=True
                )
            rules = GLOBALS if not kind else params_of(release(site)).get(kind)
            if rules is None and kind not in UNMODELLED:
                raise Refused(
                    f"error: executing {command}: Invalid argument (site: no "
                    f"parameter type '{kind}')",
                    errno.EINVAL,
                    whole=True,
                )
            if rules and name in rules:  # (site) the real MGS stores the value unchecked
                _check_value(command, param, value, rules[name])
        params[:] = [p for p in params if not (p["permanent"] and p["param"] == param)]
        if not delete:
            params.append({"host": site.host, "param": param, "value": value, "permanent": True})


def _set_now(
    site: Site, state: dict, command: str, words: list[str], chosen: str
) -> tuple[int, list]:
    """Set each parameter on every device of this host it names, in argv order.

    The exit status: on 2.15 the first failure's (jt_lcfg_setparam, v2_15_7
    lustre/utils/lustre_cfg.c:1493-1536: `if (rc == 0) rc = rc2`); on 2.16 and master the last
    parameter's (v2_16_1 lustre/utils/lustre_param.c:942-964: `rc = do_param_op(...)`, which
    also prints "setting 'x'='v': <error>"). Either way every parameter is tried and what could
    be set stays set."""
    tables = params_of(chosen)
    have = _devices(state, site.host)
    rc, complaints = 0, []
    while words:
        param, eq, value = words.pop(0).partition("=")
        if not eq:
            value = words.pop(0) if words else ""
        if not value:
            if chosen == "2.15":  # lustre_cfg.c:1502-1519: "no value", then on to the next
                complaints.append(f"error: {command}: setting {param}: no value")
                rc = rc or errno.EINVAL
                if eq:
                    continue
                break
            complaints.append(f"error: {command}: setting {param}: Invalid argument")
            rc = errno.EINVAL
            break
        kind, pattern, name = _split(param)
        if kind in UNMODELLED:
            raise Refused(f"this site does not model '{kind}' parameters")
        rules = GLOBALS if not kind else tables.get(kind, {})
        found = (
            []
            if name not in rules
            else [None]
            if not kind
            else sorted(
                dev for dev in have.get(kind, {}) if fnmatch.fnmatchcase(dev, pattern or "")
            )
        )
        if not found:
            complaints.append(
                f"error: {command}: param_path '{param.replace('.', '/')}': "
                "No such file or directory"
            )
            code = errno.ENOENT
        else:
            code = 0
            for dev in found:  # do_param_op: each path written, the first failure kept
                failed = _write(
                    state, kind, dev, have.get(kind, {}).get(dev), name, value, rules[name]
                )
                if failed:
                    path = (
                        f"/sys/fs/lustre/{kind}/{dev}/{name}" if kind else f"/sys/fs/lustre/{name}"
                    )
                    complaints.append(
                        f"error: {command}: setting {path}={value}: {os.strerror(failed)}"
                    )
                    code = code or failed
                else:
                    state.setdefault("lustre", {}).setdefault("params", []).append(
                        {
                            "host": site.host,
                            "param": param,
                            "value": value,
                            "permanent": False,
                            **({"device": dev} if dev else {}),
                        }
                    )
            if code and chosen != "2.15":
                complaints.append(
                    f"error: {command}: setting '{param.replace('.', '/')}'="
                    f"'{value}': {os.strerror(code)}"
                )
        rc = (rc or code) if chosen == "2.15" else code
    return rc, complaints


#: what a client device starts with (v2_15_7 lustre/ldlm/ldlm_lib.c:495-520): mdc and osc
#: max_rpcs_in_flight OBD_MAX_RIF_DEFAULT (8), mdc max_mod_rpcs_in_flight one less, capped by
#: the MDT's ocd_maxmodrpcs at connection (lustre/ptlrpc/import.c:916)
RIF_DEFAULT, RIF_MAX = 8, 512  # OBD_MAX_RIF_DEFAULT, OBD_MAX_RIF_MAX (lustre/include/obd.h)
PAGE = 4096


def _write(
    state: dict, kind: str, dev: str | None, handle, name: str, value: str, rule
) -> int | None:
    """Write `value` to one device's parameter: the errno the kernel answers, or None.

    Values that depend on another side are checked against it: a client's mdc
    max_mod_rpcs_in_flight against the MDT's limit and its osc max_pages_per_rpc against the
    OST's brw_size, both as the client got them at connection (its mount), as the kernel does.
    """
    code = value_error(rule, value)
    if code:
        return code
    if kind in ("mdc", "osc") and name in (
        "max_rpcs_in_flight",
        "max_mod_rpcs_in_flight",
        "max_pages_per_rpc",
    ):
        entry, target = handle
        mine = entry.setdefault("tunables", {}).setdefault(dev, {})
        got = entry.get("connect", {}).get(target, {})
        if name == "max_pages_per_rpc":
            return (
                _max_pages_per_rpc(value, got.get("brw_size", BRW_DEFAULT))
                if kind == "osc"
                else None
            )
        if kind == "mdc":
            return _mdc_rpcs(mine, got.get("maxmodrpcs", MODRPCS_DEFAULT), name, int(value))
        mine[name] = int(value)
    elif (kind, name) in (("obdfilter", "brw_size"), ("mdt", "max_mod_rpcs_in_flight")):
        number = _size(value, "M") if name == "brw_size" else int(value, 0)
        state.setdefault("lustre", {}).setdefault("tunables", {}).setdefault(
            str(handle["uuid"]), {}
        )[name] = number
    return None


def _max_pages_per_rpc(value: str, brw_size: int) -> int | None:
    """lprocfs_obd_max_pages_per_rpc_seq_write (v2_15_7 lustre/obdclass/lprocfs_status.c:2096,
    v2_16_1 :2145): a size of 1 MiB or more is bytes, less is pages; zero, or more pages than
    the OST's brw_size at connection (ocd_brw_size), is ERANGE."""
    number = _size(value, "B")
    if number is None:
        return errno.EINVAL
    pages = number // PAGE if number >= 1 << 20 else number
    return errno.ERANGE if pages == 0 or pages > brw_size // PAGE else None


def _mdc_rpcs(mine: dict, maxmodrpcs: int, name: str, value: int) -> int | None:
    """obd_set_max_rpcs_in_flight / obd_set_max_mod_rpcs_in_flight (v2_15_7
    lustre/obdclass/genops.c:2066 and :2128, v2_16_1 :2024 and :2087)."""
    rif = mine.setdefault("max_rpcs_in_flight", RIF_DEFAULT)
    mod = mine.setdefault("max_mod_rpcs_in_flight", min(RIF_DEFAULT - 1, maxmodrpcs))
    if not 1 <= value <= RIF_MAX:
        return errno.ERANGE
    if name == "max_rpcs_in_flight":
        if value < 2:
            return errno.ERANGE
        if value <= mod:  # max_mod_rpcs_in_flight stays strictly below
            failed = _mdc_rpcs(mine, maxmodrpcs, "max_mod_rpcs_in_flight", value - 1)
            if failed:
                return failed
        mine["max_rpcs_in_flight"] = value
        return None
    value = min(value, RIF_MAX - 1)
    if value >= rif:  # max_rpcs_in_flight is raised first, and stays raised on a failure
        mine["max_rpcs_in_flight"] = value + 1
    if value > maxmodrpcs:  # "can't set max_mod_rpcs_in_flight=N higher than ..."
        return errno.ERANGE
    mine["max_mod_rpcs_in_flight"] = value
    return None


def _erase_lcfg(site: Site, command: str, args: list[str]) -> int:
    if release(site) != "master":
        return _erase_lcfg_2_15(site, command, args)
    usage = f"usage: {command} [--help] [--quiet] FSNAME"
    try:
        options, words = parse(args, ["h|help", "q|quiet"])
    except OptionError:
        raise Refused(usage, 4, whole=True) from None
    names = {name for name, _ in options}
    if "help" in names:
        raise Refused(usage, 4, whole=True)
    if not words:
        raise Refused(f"{command}: missing fsname\n{usage}", 4, whole=True)
    fsname, quiet = words[0], "quiet" in names
    if not quiet:
        print(f"{command}: erasing config log and params for fsname '{fsname}'")
    with site.state() as state:
        mgs = next(
            (
                info
                for owner, _, info in mounted_targets(state)
                if owner == site.host and "mgs" in info["kinds"]
            ),
            None,
        )
        if mgs is None:
            raise Refused("This command must be run on the MGS.", errno.ENODEV, whole=True)
        if fsname not in mgs.get("mgs_db", {}):
            raise Refused(
                f"{command}: OBD_IOC_LCFG_ERASE failed: No such file or directory",
                errno.ENOENT,
                whole=True,
            )
        del mgs["mgs_db"][fsname]
        params = state.setdefault("lustre", {}).setdefault("params", [])
        erased = [p for p in params if p["permanent"] and fsname in p["param"]]
        params[:] = [p for p in params if p not in erased]
    if not quiet:
        print(
            f"{command}: erased {len(erased)} parameter{'s' if len(erased) > 1 else ''} "
            f"matching fsname '{fsname}'"
        )
    return 0


def _erase_lcfg_2_15(site: Site, command: str, args: list[str]) -> int:
    """jt_lcfg_erase of 2.15 and 2.16 (v2_15_7 lustre/utils/obd.c:2601, v2_16_1 obd.c:2528):
    `erase_lcfg FSNAME [-q|--quiet]` and nothing else (CMD_HELP), silent when it works; no MGS
    here (get_mgs_device) and an unknown filesystem (the ioctl's -1) both exit 1."""
    if len(args) not in (1, 2) or (
        len(args) == 2 and not (args[1].startswith("-q") or args[1].startswith("--quiet"))
    ):
        raise Refused(
            f"{command}: erase the filesystem's configuration logs (MGS only)\n"
            f"usage: {command} <fsname>",
            4,
            whole=True,
        )
    fsname = args[0]
    with site.state() as state:
        mgs = next(
            (
                info
                for owner, _, info in mounted_targets(state)
                if owner == site.host and "mgs" in info["kinds"]
            ),
            None,
        )
        if mgs is None:
            raise Refused("This command must be run on the MGS.", 1, whole=True)
        if fsname not in mgs.get("mgs_db", {}):
            raise Refused(
                f"error: {command}: OBD_IOC_LCFG_ERASE failed: No such file or directory",
                1,
                whole=True,
            )
        del mgs["mgs_db"][fsname]
        params = state.setdefault("lustre", {}).setdefault("params", [])
        params[:] = [p for p in params if not (p["permanent"] and fsname in p["param"])]
    return 0
