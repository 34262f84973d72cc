"""The client-side stand-ins, run as the job's user: daos (container create / destroy / list),
dfuse (mount a POSIX container) and fusermount3 (unmount it). Rules and sources: daos_tools.py.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from typing import Any

from argv_grammar import Arg, Command, Flag, GetoptError, Parsed, getopt_long
from daos_rules import DER, Identity, default_cont_acl, effective_perms, is_uuid, label_ok
from daos_site import (
    Fail,
    caller,
    connect,
    cont_open,
    daos_state,
    find_cont,
    opaque,
    principal_flag,
    release,
    run_go,
    size_flag,
    status,
)
from sitelib import Refused, Site, holders, register

CONT_TYPES = {
    "POSIX": "POSIX",
    "HDF5": "HDF5",
    "PYTHON": "PYTHON",
    "SPARK": "SPARK",
    "DATABASE": "DATABASE",
    "DB": "DATABASE",
    "ROOT": "ROOT",
    "RNTUPLE": "ROOT",
    "SEISMIC": "SEISMIC",
    "DSG": "SEISMIC",
    "METEO": "METEO",
    "FDB": "METEO",
}


def _cont_type(s: str) -> str:
    if not s:
        raise ValueError("empty container type")
    if s.upper() not in CONT_TYPES:
        raise ValueError(f"unknown container type {json.dumps(s)}")
    return CONT_TYPES[s.upper()]


def _arg_or_id(s: str) -> str | None:
    """argOrID (cmd/daos/pool.go): an invalid label is kept unparsed, i.e. no ID at all."""
    return s if is_uuid(s) or label_ok(s) else None


def _mode(s: str) -> str:
    if s.lower() not in ("relaxed", "balanced"):
        raise ValueError(f"unknown consistency mode {json.dumps(s)}" if s else "empty cons mode")
    return s.lower()


DAOS_POOL_ARG = Arg("<pool label or UUID>", convert=_arg_or_id)
DAOS = Command(
    "daos",
    flags=[Flag("debug"), Flag("verbose"), Flag("json", "j"), Flag("sys-name", "G", "string")],
).sub(
    Command("container", aliases=("cont",)).sub(
        Command(
            "create",
            flags=[
                Flag("type", "t", "main.ContTypeFlag", _cont_type),
                Flag("path", "p", "string"),
                Flag("chunk-size", "z", "main.ChunkSizeFlag", size_flag),
                Flag("oclass", "o", "main.ObjClassFlag"),
                Flag("dir-oclass", "d", "main.ObjClassFlag"),
                Flag("file-oclass", "f", "main.ObjClassFlag"),
                Flag("hints", "H", "string"),
                Flag("properties", "", "main.CreatePropertiesFlag"),
                Flag("mode", "M", "main.ConsModeFlag", _mode),
                Flag("acl-file", "A", "string"),
                Flag("group", "g", "ui.ACLPrincipalFlag", principal_flag),
            ],
            args=[DAOS_POOL_ARG, Arg("label")],
        ),
        Command(
            "destroy",
            flags=[Flag("path", "p", "string"), Flag("force", "f")],
            args=[DAOS_POOL_ARG, Arg("container name or UUID", convert=_arg_or_id)],
        ),
        Command("list", aliases=("ls",), args=[DAOS_POOL_ARG]),
        *opaque(
            "link",
            "list-objects",
            "query",
            "stat",
            "clone",
            "check",
            "evict",
            "list-attr",
            "del-attr",
            "get-attr",
            "set-attr",
            "get-prop",
            "set-prop",
            "get-acl",
            "overwrite-acl",
            "update-acl",
            "delete-acl",
            "set-owner",
            "create-snap",
            "destroy-snap",
            "list-snap",
            "rollback",
        ),
    ),
    *opaque("pool", "filesystem", "object", "system", "version", "health", "server-version"),
)


def _cont_create(site: Site, p: Parsed):
    o = p.opts
    label = p.args.get("label", "")
    for flag in ("path", "properties", "acl-file"):
        if flag in o:
            raise Fail(f"stand-in: daos container create --{flag} is not modelled")
    if label and not label_ok(label):
        raise Fail(f"invalid label {json.dumps(label)}")
    if not p.args.get("<pool label or UUID>"):
        raise Fail("no pool ID or dfs path supplied")
    who = caller()
    with site.state() as state:
        pool, perms = connect(daos_state(state), p.args["<pool label or UUID>"], who, rw=True)
        if not set(perms) & set("wc"):
            raise status("DER_NO_PERM", "failed to create container: ")
        if label and label in pool["containers"]:
            raise status("DER_EXIST", "failed to create container: ")
        cont = {
            "uuid": str(uuid.uuid4()),
            "label": label,
            "type": o.get("type", "unknown"),
            "owner": who.principal,
            "group": o.get("group", who.group),
            "uid": who.uid,
            "gid": who.gid,
            "acl": default_cont_acl(),
        }
        pool["containers"][label or cont["uuid"]] = cont
    resp = {
        "pool_uuid": pool["uuid"],
        "container_uuid": cont["uuid"],
        "container_label": label or None,
        "container_type": cont["type"],
    }
    rows = [("Container UUID", cont["uuid"])] + ([("Container Label", label)] if label else [])
    rows.append(("Container Type", cont["type"]))
    pad = max(len(k) for k, _ in rows)
    text = [f"Successfully created container {cont['uuid']}"]
    text += [f"  {k:<{pad}}: {v}" for k, v in rows]
    return {k: v for k, v in resp.items() if v is not None}, "\n".join(text)


def _cont_destroy(site: Site, p: Parsed):
    if "path" in p.opts:
        raise Fail("stand-in: daos container destroy --path is not modelled")
    ident = p.args.get("container name or UUID")
    if not p.args.get("<pool label or UUID>"):
        raise Fail("no pool UUID or label supplied")
    if not ident:
        raise Fail("no UUID or label or path for container")
    who = caller()
    with site.state() as state:
        daos = daos_state(state)
        try:
            pool, perms = connect(daos, p.args["<pool label or UUID>"], who, rw=True)
            rw = True
        except Fail:
            pool, perms = connect(daos, p.args["<pool label or UUID>"], who, rw=False)
            rw = False
        cont = find_cont(pool, ident)
        prefix = f"failed to destroy container {ident}: "
        if cont is None:
            raise status("DER_NONEXIST", prefix)
        cont_perms = effective_perms(cont["acl"], cont["owner"], cont["group"], who)
        if not (
            (rw and set(perms) & set("wd"))
            or (rw and "d" in cont_perms and cont_open(cont, who, rw=True))
        ):
            raise status("DER_NO_PERM", prefix)
        handles = [
            m
            for mounts in daos["dfuse"].values()
            for m in mounts.values()
            if m.get("container_uuid") == cont["uuid"] and not m.get("evicted")
        ]
        if handles and not p.opts.get("force"):
            raise status("DER_BUSY", prefix)
        for m in handles:
            m["evicted"] = True  # dfuse keeps running on a dead handle until unmounted
        del pool["containers"][cont["label"] or cont["uuid"]]
    return None, f"Successfully destroyed container {ident}"


def _cont_list(site: Site, p: Parsed):
    ident = p.args.get("<pool label or UUID>")
    who = caller()
    with site.state() as state:
        try:
            pool, _ = connect(daos_state(state), ident, who, rw=False)
        except Fail as e:
            raise Fail(f"failed to connect to pool {ident or ''}: {e.message}", e.status) from None
    conts = [{"uuid": c["uuid"], "label": c["label"]} for c in pool["containers"].values()]
    text = [f"{'UUID':<36} Label", f"{'----':<36} -----"]
    text += [f"{c['uuid']} {c['label'] or 'container_label_not_set'}" for c in conts]
    return conts, "\n".join(text)


@register("daos")
def daos(site: Site, args: list[str]) -> int:
    """The DAOS user tool; runs as the job's user, whose identity is os.getuid()."""
    return run_go(
        "daos",
        DAOS,
        {
            ("container", "create"): _cont_create,
            ("container", "destroy"): _cont_destroy,
            ("container", "list"): _cont_list,
        },
        site,
        args,
    )


DFUSE_LONG = {
    "mountpoint": (True, "m"),
    "multi-user": (False, "M"),
    "path": (True, "P"),
    "pool": (True, "p"),
    "container": (True, "c"),
    "sys-name": (True, "G"),
    "singlethread": (False, "S"),
    "thread-count": (True, "t"),
    "eq-count": (True, "e"),
    "foreground": (False, "f"),
    "enable-caching": (False, "E"),
    "enable-wb-cache": (False, "F"),
    "disable-caching": (False, "A"),
    "disable-wb-cache": (False, "B"),
    "dump-handles": (True, "D"),
    "read-handles": (True, "R"),
    "read-only": (False, "r"),
    "options": (True, "o"),
    "version": (False, "v"),
    "help": (False, "h"),
}
DFUSE_USAGE = "usage: dfuse [OPTIONS] [mountpoint [pool container]]"
#: daos_der2errno, for dfuse's "Failed to connect to ...: <errno> (<strerror>)"
ERRNO = {
    "DER_NO_PERM": (1, "Operation not permitted"),
    "DER_NONEXIST": (2, "No such file or directory"),
    "DER_INVAL": (22, "Invalid argument"),
}


def _dfuse_fail(lines: list[str], der_name: str, background: bool = True) -> Refused:
    """dfuse's failure report: its lines on stdout, then (from the parent that waits for the
    daemon, dfuse_bg) 'Exiting <rc> <DER>'; the exit status is -(rc + 1000)."""
    code = DER[der_name][0]
    if background:
        lines = [*lines, f"Exiting {code} {der_name}"]
    print("\n".join(lines))
    return Refused("\n".join(lines), -(code + 1000), whole=True)


def _help_refusal() -> Refused:
    """show_help then -DER_INVAL, before dfuse forks: exit status 3."""
    print(DFUSE_USAGE)
    return Refused("", 3, whole=True)


def _atoi(s: str) -> int:
    digits = s.strip()
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    n = len(digits) - len(digits.lstrip("0123456789"))
    return sign * int(digits[:n]) if n else 0


def _fuse_path(mnt: str) -> str:
    """fuse_mnt_resolve_path (libfuse lib/mount_util.c): the parent resolved, the last
    component kept as given."""
    head, last = os.path.split(os.path.abspath(mnt).rstrip("/") or "/")
    if last in ("", ".", ".."):
        return os.path.realpath(mnt)
    return os.path.join(os.path.realpath(head), last)


def _dfuse_args(args: list[str]) -> tuple[dict[str, Any], str | None, str | None, str | None]:
    """getopt_long plus dfuse's own rules: (options, mount point, pool, container)."""
    try:
        opts, operands = getopt_long("dfuse", args, "Mm:St:o:fhe:v", DFUSE_LONG)
    except GetoptError as e:
        print(DFUSE_USAGE)
        raise Refused(str(e), 3, whole=True) from None
    given: dict[str, Any] = dict(opts)
    # --enable-caching and --disable-caching: the last one given wins (dfuse_main.c:486-495)
    given["caching"] = next((ch == "E" for ch, _ in reversed(opts) if ch in "EA"), True)
    if len(operands) > 3:
        raise _help_refusal()
    mountpoint, pool, cont = given.get("m"), given.get("p", ""), given.get("c", "")
    mountpoint = operands[0] if operands else mountpoint
    pool = operands[1] if len(operands) > 1 else pool
    cont = operands[2] if len(operands) > 2 else cont
    for ch, value in opts:
        if ch == "o":  # parse_mount_option: its loop breaks after the first known key
            for token in (value or "").split(","):  # (-o takes a value: never None)
                if token.startswith("pool="):
                    pool = token[5:]
                elif token.startswith("container="):
                    cont = token[10:]
                elif token.startswith("ro"):
                    given["r"] = None
                elif token.startswith("multi_user"):
                    given["M"] = None
                else:
                    continue
                break
    return given, mountpoint, pool, cont


@register("dfuse")
def dfuse(site: Site, args: list[str]) -> int:
    """Mount a POSIX container with FUSE (as the job's user); the mount lives in the state."""
    release(site)
    given, mountpoint, pool_name, cont_name = _dfuse_args(args)
    if "h" in given or "v" in given:
        print(DFUSE_USAGE if "h" in given else "dfuse version 2.6.5")
        return 0
    if not mountpoint:
        print("Mountpoint is required")
        raise _help_refusal()
    for ch, what in (
        ("f", "--foreground"),
        ("P", "--path"),
        ("D", "--dump-handles"),
        ("R", "--read-handles"),
    ):
        if ch in given:
            raise Refused(f"stand-in: dfuse {what} is not modelled", 2)
    threads = _atoi(given["t"]) if "t" in given else (2 if "S" in given else 16)
    if threads - (_atoi(given["e"]) if "e" in given else 1) < 1:
        raise _dfuse_fail(["Dfuse needs at least one fuse thread."], "DER_INVAL", False)
    if cont_name and not pool_name:
        raise _dfuse_fail(["Container name specified without pool"], "DER_INVAL")
    who = caller()
    path = _fuse_path(mountpoint)
    with site.state() as state:
        daos = daos_state(state)
        mounts = daos["dfuse"].setdefault(site.host, {})
        below = mounts.get(path)
        if below is not None:  # dfuse serves the DUNS xattr on a mount's root
            if pool_name:
                raise _dfuse_fail(["Pool specified multiple ways"], "DER_INVAL")
            pool_name, cont_name = below["pool_uuid"] or "", below["container_uuid"] or ""
        else:
            _check_mount_point(mountpoint)
        pool = cont = None
        if pool_name:
            try:
                if not (is_uuid(pool_name) or label_ok(pool_name)):
                    raise status("DER_INVAL")  # daos_pool_connect checks the label first
                pool, _ = connect(daos, pool_name, who, rw=False)
            except Fail as e:
                errno, text = ERRNO[e.der]
                raise _dfuse_fail([f"Failed to connect to pool: {errno} ({text})"], e.der) from None
        if cont_name:
            assert pool is not None  # a container is named with its pool (refused above if not)
            problem = _cont_problem(find_cont(pool, cont_name), who)
            if problem:
                errno, text = ERRNO[problem]
                raise _dfuse_fail([f"Failed to connect to container: {errno} ({text})"], problem)
            cont = find_cont(pool, cont_name)
        problem = _fuse_mount_problem(mountpoint, who)
        if problem:
            print(problem, file=sys.stderr)  # fusermount3's complaint; dfuse then gives up
            raise _dfuse_fail([], "DER_INVAL")
        entry = {
            "pool": pool_name or None,
            "pool_uuid": pool and pool["uuid"],
            "container": cont_name or None,
            "container_uuid": cont and cont["uuid"],
            "uid": who.uid,
            "gid": who.gid,
            "user": who.user,
            "read_only": "r" in given or bool(cont and not cont_open(cont, who, rw=True)),
            "multi_user": "M" in given,
            # what caching does to reads is daos_files.py's
            "caching": given["caching"],
        }
        if below is not None:
            entry["covers"] = below  # FUSE mounts stack; unmounting uncovers the one below
        mounts[path] = entry
    return 0


def _check_mount_point(mountpoint: str) -> None:
    """duns_resolve_path on the mount point: it must exist and be reachable by the caller."""
    try:
        os.lstat(mountpoint)
    except FileNotFoundError:
        raise _dfuse_fail(["Mount point does not exist"], "DER_NONEXIST") from None
    except PermissionError:
        raise _dfuse_fail(
            ["Error resolving mount point: 13 (Permission denied)"], "DER_NO_PERM"
        ) from None


def _cont_problem(cont: dict | None, who: Identity) -> str:
    """dfuse_cont_open: open read-write, else read-only, then dfs_mount (POSIX only)."""
    if cont is None:
        return "DER_NONEXIST"
    if not (cont_open(cont, who, rw=True) or cont_open(cont, who, rw=False)):
        return "DER_NO_PERM"
    return "" if cont["type"] == "POSIX" else "DER_INVAL"


def _fuse_mount_problem(mountpoint: str, who: Identity) -> str:
    """fusermount3's check_perm for a non-root caller (root is not checked): it chdirs into
    the mount point as the caller (util/fusermount.c, libfuse 3.14), so every directory above
    must let the caller pass."""
    if who.uid == 0:
        return ""
    st = os.lstat(mountpoint)
    if stat.S_ISDIR(st.st_mode):
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        try:  # it works from inside the mount point, reached as the user
            os.chdir(mountpoint)
        except OSError as e:
            return f"fusermount3: failed to chdir to mountpoint: {e.strerror}"
        finally:
            os.fchdir(here)
            os.close(here)
        if st.st_mode & stat.S_ISVTX and st.st_uid != who.uid:
            return f"fusermount3: mountpoint {mountpoint} not owned by user"
        if not os.access(mountpoint, os.W_OK):
            return f"fusermount3: user has no write access to mountpoint {mountpoint}"
        return ""
    if stat.S_ISREG(st.st_mode):
        return (
            ""
            if os.access(mountpoint, os.W_OK)
            else f"fusermount3: failed to open {mountpoint}: Permission denied"
        )
    return f"fusermount3: mountpoint {mountpoint} is not a directory or a regular file"


@register("fusermount3")
def fusermount3(site: Site, args: list[str]) -> int:
    """Unmount a dfuse mount of this host (mounting is dfuse's job, through libfuse)."""
    longs = {
        "unmount": (False, "u"),
        "lazy": (False, "z"),
        "quiet": (False, "q"),
        "help": (False, "h"),
        "version": (False, "V"),
    }
    try:
        opts, operands = getopt_long("fusermount3", args, "hVo:uzq", longs)
    except GetoptError as e:
        raise Refused(str(e), 1, whole=True) from None
    given = {ch for ch, _ in opts}
    if "h" in given:
        print("fusermount3: [options] mountpoint")
        raise Refused("", 1, whole=True)
    if "V" in given:
        print("fusermount3 version: 3.14.0")
        return 0
    if "z" in given and "u" not in given:
        raise Refused("-z can only be used with -u")
    if not operands:
        raise Refused("missing mountpoint argument")
    if len(operands) > 1:
        raise Refused("extra arguments after the mountpoint")
    mnt = operands[0]
    if not mnt:
        raise Refused("invalid mountpoint ''")
    if not os.path.isdir(os.path.dirname(os.path.abspath(mnt))):
        raise Refused(f"bad mount point {mnt}: No such file or directory")
    if "u" not in given:
        raise Refused("old style mounting not supported")  # only libfuse mounts, via a socket
    path = _fuse_path(mnt)
    quiet = "q" in given
    with site.state() as state:
        mounts = daos_state(state)["dfuse"].setdefault(site.host, {})
        entry = mounts.get(path)
        if os.getuid() != 0 and (entry is None or entry["uid"] != os.getuid()):
            raise _quiet(quiet, f"entry for {path} not found in /etc/mtab")
        # unmount_fuse_locked: chdir_to_parent with the caller's own rights (drop_privs),
        # then umount2 of the last component; -q does not silence this one
        try:
            os.chdir(os.path.dirname(path))
        except OSError as e:
            raise Refused(f"failed to chdir to {os.path.dirname(path)}: {e.strerror}") from None
        if entry is None:
            why = "Invalid argument" if os.path.lexists(path) else "No such file or directory"
            raise _quiet(quiet, f"failed to unmount {path}: {why}")
        if "z" not in given and holders(path):
            # umount2(2) is EBUSY while a process has its cwd, root or an open file in the
            # mount; -z adds UMOUNT_DETACH (fusermount.c unmount_fuse_locked(), libfuse 3.14)
            raise _quiet(quiet, f"failed to unmount {path}: Device or resource busy")
        if "covers" in entry:
            mounts[path] = entry["covers"]
        else:
            del mounts[path]
    return 0


def _quiet(quiet: bool, message: str) -> Refused:
    """-q silences fusermount3's complaint, not its exit status."""
    return Refused("", 1, whole=True) if quiet else Refused(message)
