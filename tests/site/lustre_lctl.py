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

from disk_state import mounts
from gnu_getopt import OptionError, parse
from lnet import BadNid, parse_nid
from lustre_model import host_nids, lustre_of, mounted_targets, resolver
from sitelib import Refused, Site

__all__ = ["lctl", "PARAMS"]

#: lctl's command names (lustre/utils/lctl.c cmdlist); those without a handler here are real
#: commands this site does not model
COMMANDS = set("""abort_recovery abort_recovery_mdt activate add_interface add_peer add_route
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
setup show show_route snapshot test_brw version which_nid""".split())

MiB = 1 << 20
#: parameter type -> name -> value rule; the rules are the kernel's *_store() checks:
#: uint (kstrtouint), int, bool (kstrtobool), size (sysfs_memparse; default unit given),
#: (uint, lo, hi) ranges (ERANGE outside), rpc (max_rpc_store), brw (ofd brw_size_store)
PARAMS = {
    "osc": {"max_pages_per_rpc": "rpc", "max_rpcs_in_flight": ("uint", 1, 256),
            "max_dirty_mb": "size:M", "checksums": "bool", "short_io_bytes": "size:B",
            "idle_timeout": "uint", "grant_shrink": "bool", "resend_count": "uint",
            "active": "bool", "checksum_type": ("choice", "crc32", "adler", "crc32c", "t10ip512",
                                                "t10ip4K", "t10crc512", "t10crc4K")},
    "mdc": {"max_rpcs_in_flight": ("uint", 1, 512), "max_mod_rpcs_in_flight": ("uint", 1, 512),
            "max_pages_per_rpc": "rpc", "checksums": "bool", "active": "bool",
            "idle_timeout": "uint"},
    "llite": {"checksum_pages": "bool", "checksums": "bool", "max_read_ahead_mb": "size:M",
              "max_read_ahead_per_file_mb": "size:M", "max_read_ahead_whole_mb": "size:M",
              "max_cached_mb": "size:M", "statahead_max": "uint", "statahead_agl": "bool",
              "lazystatfs": "bool", "xattr_cache": "bool", "fast_read": "bool",
              "stats_track_pid": "uint", "file_heat": "bool"},
    "ldlm": {"lru_size": "lru", "lru_max_age": "uint", "early_lock_cancel": "bool",
             "dirty_age_limit": "uint", "max_parallel_ast": "uint",
             "contention_seconds": "uint"},
    "obdfilter": {"brw_size": "brw", "readcache_max_filesize": "size:B",
                  "read_cache_enable": "bool", "writethrough_cache_enable": "bool",
                  "sync_journal": "bool", "degraded": "bool", "grant_compat_disable": "bool",
                  "precreate_batch": "uint", "client_cache_count": "uint"},
    "osd-ldiskfs": {"read_cache_enable": "bool", "writethrough_cache_enable": "bool",
                    "readcache_max_filesize": "size:B"},
    "mdt": {"identity_upcall": "str", "enable_remote_dir": "bool", "dom_stripesize": "size:B",
            "commit_on_sharing": "bool", "enable_dir_migration": "bool"},
    "lod": {"stripesize": "size:B", "stripecount": "int", "qos_prio_free": ("uint", 0, 100)},
    "mgs": {},
}
#: parameters directly under the top level (lctl set_param timeout=...)
GLOBALS = {"timeout": "uint", "at_min": "uint", "at_max": "uint", "at_history": "uint",
           "ldlm_timeout": "uint", "jobid_var": "str", "jobid_name": "str", "debug": "str",
           "subsystem_debug": "str", "debug_mb": "uint", "max_dirty_mb": "size:M"}
#: real parameter types this site does not model
UNMODELLED = {"mds", "ost", "lov", "lmv", "mgc", "osp", "mdd", "qmt", "nodemap", "osd-zfs",
              "health_check", "sptlrpc", "seq", "fld", "lfsck", "quota"}
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
    elif kind == "rpc":  # a bare count of pages up to PTLRPC_MAX_BRW_PAGES, or a size
        size = _size(value, "B")
        if size is None:
            return errno.EINVAL
        if value.isdigit() and size <= 64 * MiB // 4096:
            size *= 4096
        return None if 64 * 1024 <= size <= 64 * MiB else errno.ERANGE
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


def _host_devices(state: dict, host: str) -> dict[str, set[str]]:
    """The parameter devices the host has now, by type."""
    found: dict[str, set[str]] = {t: set() for t in PARAMS}
    for entry in mounts(state, host):
        if entry.get("kind") == "client":
            mgs = lustre_of(state, *entry["mgs"]) or {}
            names = mgs.get("mgs_db", {}).get(entry["fsname"], {})
            inst = entry["instance"]
            found["llite"].add(f"{entry['fsname']}-{inst}")
            for name in names:
                kind = "osc" if "-OST" in name else "mdc"
                found[kind].add(f"{name}-{kind}-{inst}")
                found["ldlm"].add(f"{name}-{kind}-{inst}")
    for owner, entry, info in mounted_targets(state):
        if owner != host:
            continue
        name = info["svname"]
        found["osd-ldiskfs"].add(name)
        if "ost" in info["kinds"]:
            found["obdfilter"].add(name)
            found["ldlm"].add(f"filter-{name}_UUID")
        if "mdt" in info["kinds"]:
            found["mdt"].add(name)
            found["lod"].add(f"{name}-mdtlov")
            found["ldlm"].add(f"mdt-{name}_UUID")
        if "mgs" in info["kinds"]:
            found["mgs"].add("MGS")
            found["ldlm"].add("MGS")
    return found


def _has_mgs(state: dict, host: str) -> bool:
    return any(owner == host and "mgs" in info["kinds"]
               for owner, _, info in mounted_targets(state))


def lctl(site: Site, args: list[str]) -> int:
    """`lctl ping|list_nids|set_param|erase_lcfg ...`; other real commands are not modelled."""
    if not args:
        raise Refused("this site does not model interactive lctl: give a command")
    command, rest = args[0], args[1:]
    handlers = {"ping": _ping, "list_nids": _list_nids, "set_param": _set_param,
                "erase_lcfg": _erase_lcfg, "lcfg_erase": _erase_lcfg}
    if command in handlers:
        return handlers[command](site, command, rest)
    if command in COMMANDS:
        raise Refused(f"this site does not model 'lctl {command}'")
    raise Refused(f"'{command}' is not a valid command. See 'lctl --list-commands'.")


def _ping(site: Site, command: str, args: list[str]) -> int:
    if not args:
        raise Refused(f"usage: {command} id [timeout (secs)]", errno.EINVAL, whole=True)
    target = args[0]
    pid, dash, rest = target.partition("-")
    text = rest if dash and pid.lstrip("uU").isdigit() else target
    try:
        nid = parse_nid(text, resolver(site))
    except BadNid:
        raise Refused(f"failed to ping {target}: Invalid argument", errno.EINVAL,
                      whole=True) from None
    seconds = re.match(r"\s*([+-]?\d+)", args[1]) if len(args) > 1 else None  # atol()
    if seconds and int(seconds[1]) > 120:
        raise Refused(f"Timeout {args[1]} is to large", errno.EINVAL, whole=True)
    if not any(nid in host_nids(site, host) for host in site.facts["hosts"]):
        # no LNet peer answers: lnet_ping() gives -EIO
        raise Refused(f"failed to ping {target}: Input/output error", errno.EIO, whole=True)
    print(f"12345-0@lo\n12345-{nid}")
    return 0


def _list_nids(site: Site, command: str, args: list[str]) -> int:
    for nid in sorted(host_nids(site, site.host)):
        print(nid)
    return 0


_SET_PARAM = ["C|client=?", "d|delete", "F|file", "n|noname", "o|module", "P|perm|permanent",
              "t|threads=?"]
_SET_PARAM_HELP = ("usage: set_param [--client|-C[FSNAME]] [--delete|-d] [--file|-F "
                   "YAML_PARAM_FILE] [--no-name|-n] [--module|-o] [--permanent|-P] "
                   "[--thread|-t[THREAD_COUNT]] PARAM1=VALUE1 [PARAM2=VALUE2 ...]")


def _set_param(site: Site, command: str, args: list[str]) -> int:
    try:
        options, words = parse(args, _SET_PARAM)
    except OptionError:  # set_param runs getopt with opterr = 0: only its help is printed
        raise Refused(_SET_PARAM_HELP, 4, whole=True) from None
    opts = dict(options)
    if "perm" in opts and "client" in opts:
        first = next(n for n, _ in options if n in ("perm", "client"))
        other = "C" if first == "perm" else "P"
        raise Refused(f"error: {command}: -{other} cannot be used with -{first[0].upper()}\n"
                      + _SET_PARAM_HELP, 4, whole=True)
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
        rc, complaints = _set_now(site, state, command, words)
    # the parameters that could be set stay set; the exit status is the last parameter's
    if rc:
        raise Refused("\n".join(complaints), rc, whole=True)
    if complaints:
        print("\n".join(complaints), file=sys.stderr)
    return 0


def _check_value(command: str, param: str, value: str, rule) -> None:
    code = value_error(rule, value)
    if code:
        raise Refused(f"error: {command}: setting '{param.replace('.', '/')}'='{value}': "
                      f"{os.strerror(code)}", code, whole=True)


def _set_permanent(site: Site, state: dict, command: str, words: list[str], delete: bool) -> None:
    if not _has_mgs(state, site.host):
        raise Refused(f"This command must be run on the MGS.\nerror: executing {command}: "
                      "No such device", errno.ENODEV, whole=True)
    params = state.setdefault("lustre", {}).setdefault("params", [])
    for word in words:
        param, eq, value = word.partition("=")
        kind, _, name = _split(param)
        if not delete:
            if not eq or not value:
                raise Refused(f"error: executing {command}: Invalid argument", errno.EINVAL,
                              whole=True)
            rules = GLOBALS if not kind else PARAMS.get(kind)
            if rules is None and kind not in UNMODELLED:
                raise Refused(f"error: executing {command}: Invalid argument (site: no "
                              f"parameter type '{kind}')", errno.EINVAL, whole=True)
            if rules and name in rules:  # (site) the real MGS stores the value unchecked
                _check_value(command, param, value, rules[name])
        params[:] = [p for p in params if not (p["permanent"] and p["param"] == param)]
        if not delete:
            params.append({"host": site.host, "param": param, "value": value, "permanent": True})


def _set_now(site: Site, state: dict, command: str, words: list[str]) -> tuple[int, list]:
    params = []
    have = _host_devices(state, site.host)
    rc, complaints = 0, []
    while words:
        param, eq, value = words.pop(0).partition("=")
        if not eq:
            value = words.pop(0) if words else ""
        if not value:
            complaints.append(f"error: {command}: setting {param}: Invalid argument")
            rc = errno.EINVAL
            break
        kind, pattern, name = _split(param)
        if kind in UNMODELLED:
            raise Refused(f"this site does not model '{kind}' parameters")
        rules = GLOBALS if not kind else PARAMS.get(kind, {})
        exists = name in rules and (not kind or any(
            fnmatch.fnmatchcase(dev, pattern or "") for dev in have.get(kind, ())))
        if not exists:
            complaints.append(f"error: {command}: param_path '{param.replace('.', '/')}': "
                              "No such file or directory")
            rc = errno.ENOENT
            continue
        code = value_error(rules[name], value)
        if code:
            complaints.append(f"error: {command}: setting '{param.replace('.', '/')}'="
                              f"'{value}': {os.strerror(code)}")
        else:
            params.append({"host": site.host, "param": param, "value": value,
                           "permanent": False})
        rc = code or 0  # the exit status is the last parameter's, as in jt_lcfg_setparam()
    if params:
        state.setdefault("lustre", {}).setdefault("params", []).extend(params)
    return rc, complaints


def _erase_lcfg(site: Site, command: str, args: list[str]) -> int:
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
        mgs = next((info for owner, _, info in mounted_targets(state)
                    if owner == site.host and "mgs" in info["kinds"]), None)
        if mgs is None:
            raise Refused("This command must be run on the MGS.", errno.ENODEV, whole=True)
        if fsname not in mgs.get("mgs_db", {}):
            raise Refused(f"{command}: OBD_IOC_LCFG_ERASE failed: No such file or directory",
                          errno.ENOENT, whole=True)
        del mgs["mgs_db"][fsname]
        params = state.setdefault("lustre", {}).setdefault("params", [])
        erased = [p for p in params if p["permanent"] and fsname in p["param"]]
        params[:] = [p for p in params if p not in erased]
    if not quiet:
        print(f"{command}: erased {len(erased)} parameter{'s' if len(erased) > 1 else ''} "
              f"matching fsname '{fsname}'")
    return 0
