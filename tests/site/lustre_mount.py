"""Stand-ins for mount and umount: util-linux 2.38 handing `-t lustre` to mount.lustre.

`mount -t lustre` runs the mount.lustre helper and exits with the helper's status (an errno),
and the helper's messages are what the user sees, so refusals past mount(8)'s own argv checks
are worded as mount.lustre words them ("mount.lustre: mount X at Y failed: <strerror>" and the
hint lines of lustre/utils/mount_lustre.c). Mounts are kept in state["mounts"][host] (see
lustre_model.py); umount removes any entry there, whatever its fstype, so another stand-in that
records its mounts the same way gets umount for free.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

from disk_state import mounts
from gnu_getopt import OptionError, parse
from lnet import BadNid, parse_nodes
from lustre_model import (
    connect_data,
    fs_store,
    lustre_of,
    mount_path,
    mounted_targets,
    registered,
    resolver,
    running_mgs,
)
from sitelib import Refused, Site, holders

__all__ = ["mount", "umount"]

_MOUNT = [
    "a|all",
    "f|fake",
    "T|fstab=",
    "F|fork",
    "h|help",
    "n|no-mtab",
    "r|read-only|ro",
    "v|verbose",
    "V|version",
    "w|read-write|rw",
    "o|options=",
    "O|test-opts=",
    "t|types=",
    "U|uuid=",
    "L|label=",
    "B|bind",
    "M|move",
    "R|rbind",
    "make-shared",
    "make-slave",
    "make-private",
    "make-unbindable",
    "make-rshared",
    "make-rslave",
    "make-rprivate",
    "make-runbindable",
    "m|mkdir=?",
    "c|no-canonicalize",
    "i|internal-only",
    "l|show-labels",
    "target=",
    "target-prefix=",
    "source=",
    "options-mode=",
    "options-source=",
    "options-source-force",
    "N|namespace=",
]
_MOUNT_MODELLED = {
    "types",
    "options",
    "read-only",
    "read-write",
    "verbose",
    "no-mtab",
    "help",
    "version",
    "source",
    "target",
    "no-canonicalize",
}

#: mount(8) flags mount.lustre takes for itself; matched as prefixes, as its opt_map does
MOUNT_FLAGS = (
    "async",
    "atime",
    "auto",
    "defaults",
    "dev",
    "exec",
    "loop",
    "noatime",
    "noauto",
    "nodev",
    "noowner",
    "nosuid",
    "nouser",
    "nousers",
    "_netdev",
    "noexec",
    "remount",
    "ro",
    "rw",
    "suid",
    "sync",
    "diratime",
    "nodiratime",
    "norelatime",
    "relatime",
    "strictatime",
)
#: options the kernel's lmd_parse() takes out (lustre/obdclass/obd_mount.c lmd_flags_table)
LMD_OPTIONS = (
    "skip_lfsck",
    "abort_recov",
    "abort_recovery",
    "nosvc",
    "mgs",
    "nomgs",
    "writeconf",
    "noir",
    "noscrub",
    "noprimnode",
    "virgin",
    "update",
    "rdonly_dev",
    "no_create",
    "no_precreate",
    "localrecov",
    "abort_recov_mdt",
    "abort_recovery_mdt",
    "nolocallogs",
    "noclient",
    "recovery_time_soft=%u",
    "recovery_time_hard=%u",
    "exclude=%s",
    "mgsname=%s",
    "mgsnode=%s",
    "mgssec=%s",
    "svname=%s",
    "param=%s",
    "osd=%s",
    "network=%s",
    "device=%s",
)
#: client options ll_options() accepts (lustre/llite/llite_lib.c ll_sbi_flags_name); others
#: make the client refuse to mount ("Unknown option '%s', won't mount.")
CLIENT_OPTIONS = (
    "32bitapi",
    "localflock",
    "flock",
    "noflock",
    "checksum",
    "nochecksum",
    "encrypt",
    "noencrypt",
    "foreign_symlink=%s",
    "lazystatfs",
    "nolazystatfs",
    "lruresize",
    "nolruresize",
    "nolock",
    "statfs_project",
    "nostatfs_project",
    "sync_on_close",
    "nosync_on_close",
    "test_dummy_encryption=%s",
    "test_dummy_encryption",
    "user_fid2path",
    "nouser_fid2path",
    "user_principal=%s",
    "user_xattr",
    "nouser_xattr",
    "verbose",
    "noverbose",
    "always_ping",
    "context",
    "fscontext",
    "defcontext",
    "rootcontext",
    "skid=%s",
)
#: ldiskfs mount options a server target may pass to its backing filesystem (a common subset)
LDISKFS_OPTIONS = (
    "errors=%s",
    "user_xattr",
    "nouser_xattr",
    "acl",
    "noacl",
    "data=%s",
    "barrier",
    "nobarrier",
    "journal_checksum",
    "nojournal_checksum",
    "no_mbcache",
    "nodelalloc",
    "delalloc",
    "max_dir_size_kb=%u",
    "commit=%u",
    "stripe=%u",
    "resuid=%u",
    "resgid=%u",
    "usrquota",
    "grpquota",
    "prjquota",
)
#: options mount.lustre itself consumes (parse_options in mount_lustre.c)
HELPER_OPTIONS = ("force", "max_sectors_kb=%s", "md_stripe_cache_size=%s", "retry=%u", "skpath=%s")

_HINTS = {
    errno.EIO: "Is the MGS running?",
    errno.ENOENT: "Is the MGS specification correct?\nIs the filesystem name correct?\n"
    "If upgrading, is the copied client log valid? (see upgrade docs)",
    errno.EALREADY: "The target service is already running. ({source})",
    errno.EADDRINUSE: "The target service's index is already in use. ({source})",
    errno.ENOMEDIUM: "This filesystem needs at least 1 OST",
    errno.EINVAL: "This may have multiple causes.\n{cli}Are the mount options correct?\n"
    "Check the syslog for more info.",
}


def _matches(option: str, table) -> bool:
    for entry in table:
        name, _, kind = entry.partition("=")
        if not kind and option == name:
            return True
        if kind and option.startswith(name + "="):
            value = option[len(name) + 1 :]
            return bool(value) and (kind != "%u" or value.isdigit())
    return False


def _helper(message: str, rc: int) -> Refused:
    return Refused(f"mount.lustre: {message}", rc, whole=True)


def _failed(source: str, target: str, code: int) -> Refused:
    """mount.lustre's report of a failed mount(2): strerror, then its hint for that errno."""
    cli = source.rpartition(":")[2][1:] if ":/" in source else ""
    hint = _HINTS.get(code, "").format(
        source=source, cli=f"Is '{cli}' the correct filesystem name?\n" if cli else ""
    )
    text = f"mount {source} at {target} failed: {os.strerror(code)}"
    return _helper(text + (f"\n{hint}" if hint else ""), code)


def mount(site: Site, args: list[str]) -> int:
    """`mount -t lustre [-o OPTIONS] DEVICE|MGSSPEC:/FSNAME[/SUBDIR] DIR`, or list mounts."""
    try:
        options, operands = parse(args, _MOUNT)
    except OptionError as e:
        raise Refused(f"{e}\nTry 'mount --help' for more information.") from None
    opts = dict(options)
    for name in opts:
        if name not in _MOUNT_MODELLED:
            raise Refused(f"this site does not model mount --{name}", 32)
    if "help" in opts or "version" in opts:
        print("mount from util-linux 2.38.1 (libmount 2.38.1)")
        return 0
    types = opts.get("types")
    # (a value is None only for an option that takes none)
    flags = [
        o for name, value in options if name == "options" for o in (value or "").split(",") if o
    ]
    flags += ["ro"] * ("read-only" in opts) + ["rw"] * ("read-write" in opts)
    operands += [opts[k] or "" for k in ("source", "target") if k in opts]
    if not operands:
        with site.state() as state:
            for entry in mounts(state, site.host):
                if types in (None, entry.get("fstype")):
                    print(
                        f"{entry['source']} on {entry['dir']} type {entry.get('fstype')} "
                        f"({','.join(entry.get('options') or ['rw'])})"
                    )
        return 0
    if len(operands) == 1:
        raise Refused(f"{operands[0]}: can't find in /etc/fstab.")
    if len(operands) > 2:
        raise Refused("bad usage\nTry 'mount --help' for more information.")
    if types is None or "lustre" not in types.split(","):
        raise Refused("this site only stands in for lustre mounts (give -t lustre)", 32)
    source, target = operands
    if not os.path.exists(target):  # mount.lustre's realpath() of the mount point
        raise Refused(
            f"warning: {target}: cannot resolve: No such file or directory",
            errno.ENOENT,
            whole=True,
        )
    target = mount_path(target)
    with site.state() as state:
        entries = mounts(state, site.host)
        same = [e for e in entries if e["source"] == source and e["dir"] == target]
        if "remount" in flags:
            if not same:
                raise _helper(
                    f"according to /etc/mtab {source} is not already mounted on {target}",
                    errno.ENOENT,
                )
            same[-1]["options"] = flags
            return 0
        if same and "force" not in flags:
            raise _helper(
                f"according to /etc/mtab {source} is already mounted on {target}", errno.EEXIST
            )
        if not os.path.isdir(target):
            raise _failed(source, target, errno.ENOTDIR)
        if ":/" in source:
            entry = _client(site, state, source, target, flags)
        else:
            entry = _target(site, state, source, target, flags)
        entries.append(entry)
    return 0


def _unknown(flags: list[str], table) -> str | None:
    for flag in flags:
        consumed = (
            any(flag.startswith(prefix) for prefix in MOUNT_FLAGS)
            or _matches(flag, HELPER_OPTIONS)
            or _matches(flag, LMD_OPTIONS)
        )
        if not consumed and not _matches(flag, table):
            return flag
    return None


def _client(site: Site, state: dict, source: str, target: str, flags: list[str]) -> dict:
    spec, _, path = source.partition(":/")
    try:
        nodes = parse_nodes(spec, resolver(site))
    except BadNid as e:
        raise _helper(
            f"Unsupported NID '{e}': rc = Unknown error -22.\n"
            f"mount.lustre: Can't parse NID '{e}'\n\nThis mount helper should only "
            "be invoked via the mount (8) command,\ne.g. mount -t lustre dev dir",
            errno.EINVAL,
        ) from None
    fsname, _, subdir = path.lstrip("/").partition("/")
    subdir = subdir.strip("/")
    if _unknown(flags, CLIENT_OPTIONS):
        raise _failed(source, target, errno.EINVAL)
    mgs = running_mgs(site, state, nodes)
    if mgs is None:
        raise _failed(source, target, errno.EIO)
    mgs_host, mgs_entry, mgs_info = mgs
    known = registered(mgs_info, fsname)
    mdt0 = known.get(f"{fsname}-MDT0000")
    if mdt0 is None:  # no client configuration log on this MGS for that name
        raise _failed(source, target, errno.ENOENT)
    running = {info["uuid"] for _, _, info in mounted_targets(state)}
    if mdt0 not in running:
        raise _failed(source, target, errno.EIO)
    if not any(
        name.startswith(f"{fsname}-OST") and uuid in running for name, uuid in known.items()
    ):
        raise _failed(source, target, errno.ENOMEDIUM)
    store = fs_store(site, fsname, mdt0)
    shown = os.path.join(store, subdir)
    os.makedirs(store, exist_ok=True)
    if not os.path.isdir(shown):  # the fileset (subdirectory) must exist in the filesystem
        raise _failed(source, target, errno.ENOENT)
    lustre = state.setdefault("lustre", {})
    lustre["instances"] = lustre.get("instances", 0) + 1
    instance = f"ffff{lustre['instances']:012x}"
    entry: dict[str, Any] = {
        "source": source,
        "dir": target,
        "fstype": "lustre",
        "kind": "client",
        "options": flags,
        "fsname": fsname,
        "subdir": subdir,
        "mgs": [mgs_host, mgs_entry["device"]],
        "instance": instance,
        "root": shown,
        "connect": connect_data(site, state, known),
    }
    # The site's hosts are directories of one machine, so a mount point several hosts name is
    # one directory: each host's client mount there is its own (its own entry, unmounted on its
    # own), and while any of them is mounted the directory leads into the filesystem they show.
    # Two hosts showing different things at one path cannot be modelled: refused, not faked.
    others = _sharing(state, site.host, target)
    if any(e.get("root") != shown for e in others):
        raise Refused(
            f"this site does not model {target} showing something else on another host "
            f"({', '.join(sorted({e['source'] for e in others}))}): its hosts share one tree",
            32,
        )
    if not others and os.path.realpath(target) != os.path.realpath(shown):
        # what the mount shows is the filesystem: the directory it covers is set aside and the
        # mount point leads into the filesystem's store until umount puts the directory back
        entry["covered"] = os.path.join(site.dir, "lustre-fs", "covered", f"{site.host}.{instance}")
        os.makedirs(os.path.dirname(entry["covered"]), exist_ok=True)
        shutil.move(target, entry["covered"])
        os.symlink(shown, target)
    return entry


def _sharing(state: dict, host: str, point: str) -> list[dict]:
    """The other hosts' client mounts at this mount point (one directory of the site)."""
    return [
        e
        for other, entries in state.get("mounts", {}).items()
        if other != host
        for e in entries
        if e.get("kind") == "client" and e["dir"] == point
    ]


def _target(site: Site, state: dict, source: str, target: str, flags: list[str]) -> dict:
    device = os.path.abspath(source)
    info = lustre_of(state, site.host, device)
    if info is None:
        raise _helper(
            f"{source} has not been formatted with mkfs.lustre or the backend "
            "filesystem type is not supported by this tool",
            errno.ENODEV,
        )
    if info["index"] is None and info["fsname"]:
        raise _helper(
            f"{source} has no index assigned (probably formatted with old mkfs)", errno.EINVAL
        )
    if _unknown(flags, LDISKFS_OPTIONS):
        raise _failed(source, target, errno.EINVAL)
    for host, _entry, other in mounted_targets(state):
        # one service per target, and (tgt_mount.c server_start_mgs) one MGS per node
        if other["uuid"] == info["uuid"] or (
            host == site.host and "mgs" in info["kinds"] and "mgs" in other["kinds"]
        ):
            raise _failed(source, target, errno.EALREADY)
    if "mgs" in info["kinds"]:
        mgs_info = info
    else:
        mgs = running_mgs(site, state, info["mgsnode"])
        if mgs is None:
            raise _failed(source, target, errno.EIO)
        mgs_info = mgs[2]
    name = info["svname"]
    if info["fsname"] and name != "MGS":
        known = mgs_info.setdefault("mgs_db", {}).setdefault(info["fsname"], {})
        if known.get(name, info["uuid"]) != info["uuid"] and not info.get("replace"):
            raise _failed(source, target, errno.EADDRINUSE)
        known[name] = info["uuid"]
    return {
        "source": source,
        "dir": target,
        "fstype": "lustre",
        "kind": "target",
        "device": device,
        "fsname": info["fsname"],
        "svname": name,
        "options": flags,
    }


_UMOUNT = [
    "a|all",
    "A|all-targets",
    "d|detach-loop",
    "fake",
    "f|force",
    "h|help",
    "i|internal-only",
    "l|lazy",
    "c|no-canonicalize",
    "n|no-mtab",
    "q|quiet",
    "r|read-only",
    "R|recursive",
    "O|test-opts=",
    "t|types=",
    "v|verbose",
    "V|version",
    "N|namespace=",
]
_UMOUNT_UNMODELLED = {"all", "all-targets", "fake", "recursive", "test-opts", "namespace"}


def umount(site: Site, args: list[str]) -> int:
    """`umount [-f] [-l] DIR|DEVICE...`: each must be mounted on this host and not busy."""
    try:
        options, targets = parse(args, _UMOUNT)
    except OptionError as e:
        raise Refused(f"{e}\nTry 'umount --help' for more information.") from None
    opts = dict(options)
    for name in opts:
        if name in _UMOUNT_UNMODELLED:
            raise Refused(f"this site does not model umount --{name}", 32)
    if "help" in opts or "version" in opts:
        print("umount from util-linux 2.38.1 (libmount 2.38.1)")
        return 0
    if not targets:
        raise Refused("bad usage\nTry 'umount --help' for more information.")
    rc, complaints = 0, []
    with site.state() as state:
        _forget_unused(state)
        for path in targets:
            problem = _umount_one(state, site.host, path, lazy="lazy" in opts)
            if problem:
                rc += 32  # util-linux adds up the per-target exit codes
                if not (problem.endswith("not mounted.") and "quiet" in opts):
                    complaints.append(f"umount: {path}: {problem}")
    if rc:
        raise Refused("\n".join(complaints), min(rc, 255), whole=True)
    return 0


def _umount_one(state: dict, host: str, path: str, lazy: bool) -> str | None:
    entries = mounts(state, host)
    point, device = mount_path(path), os.path.abspath(path)
    found = [
        e for e in entries if e["dir"] == point or e["source"] == path or e.get("device") == device
    ]
    if not found:
        return "not mounted." if os.path.exists(path) else "no mount point specified."
    entry = found[-1]
    below = tuple(d.rstrip("/") + "/" for d in (entry["dir"], entry.get("root")) if d)
    if not lazy and any(e is not entry and e["dir"].startswith(below) for e in entries):
        return "target is busy."
    users = _users(state, host, entry)
    if users and not lazy:  # EBUSY from umount2(2): libmount's "target is busy", rc 32
        return "target is busy."
    if users and entry.get("kind") == "client":
        # MNT_DETACH takes the mount out of the tree now; it lives on, unreachable by path,
        # while it is used (fs/namespace.c umount_tree()): its users are its own, no other's
        state.setdefault("lustre", {}).setdefault("detached", []).append(
            {"host": host, "root": entry["root"], "instance": entry["instance"], "pids": users}
        )
    others = _sharing(state, host, entry["dir"])
    if entry.get("covered") and others:
        # another host's client mount there still shows the filesystem: the directory stays
        # set aside, for the last of them to put back
        others[0]["covered"] = entry["covered"]
    elif entry.get("covered"):  # put back the directory the mount covered
        if os.path.islink(entry["dir"]):
            os.unlink(entry["dir"])
        shutil.move(entry["covered"], entry["dir"])
    entries.remove(entry)
    return None


def _users(state: dict, host: str, entry: dict) -> list[int]:
    """The processes of this machine using the mount: a cwd, root or open file in it
    (sitelib.holders). Every client mount of a filesystem leads into its one store here, so
    a path there is taken to be held through the client mounts whose root holds it most
    closely (a job's process in a node's private/<node> mount does not make the primary's
    mount of the whole filesystem busy), and a process that held a mount when it was lazily
    detached stays that mount's, as on a real site, where each client mount is its own. Where
    other hosts mount the same root (every server's staging client), a process in another
    mount namespace than this umount's is another host's (the multi-host site gives each host
    its own); where the hosts share one namespace (the one-machine site) it counts for each."""
    mine = os.path.realpath(entry.get("root") or entry["dir"])
    lustre = state.get("lustre", {})
    roots = {
        os.path.realpath(r)
        for r in [
            e["root"]
            for es in state.get("mounts", {}).values()
            for e in es
            if e.get("kind") == "client" and e.get("root")
        ]
        + [d["root"] for d in lustre.get("detached", [])]
    }
    detached = {pid for d in lustre.get("detached", []) for pid in d["pids"]}
    shared = any(
        e.get("kind") == "client" and os.path.realpath(e.get("root") or e["dir"]) == mine
        for other, es in state.get("mounts", {}).items()
        if other != host
        for e in es
    )
    users = []
    for pid, held in holders(mine).items():
        inner = [r for r in roots if held == r or held.startswith(r.rstrip("/") + "/")]
        if pid in detached or max(inner, key=len, default=mine) != mine:
            continue
        if shared and not _in_my_namespace(pid):
            continue
        users.append(pid)
    return users


def _in_my_namespace(pid: int) -> bool:
    """Whether a process is in this process's mount namespace (if it cannot be told: yes)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return True


def _forget_unused(state: dict) -> None:
    """A lazily detached client mount goes once none of its users holds it any more."""
    lustre = state.get("lustre", {})
    for d in list(lustre.get("detached", [])):
        d["pids"] = [pid for pid in d["pids"] if pid in holders(d["root"])]
        if not d["pids"]:
            lustre["detached"].remove(d)
