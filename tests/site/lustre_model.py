"""What the Lustre stand-ins know about the site: formatted targets, MGSs, mounts.

A formatted target lives in its device's state (see disk_tools.py):

    device["fs"] = {"type": "ext4",                  # what blkid/wipefs see on an ldiskfs target
                    "lustre": {"fsname", "kinds": ["mgs", "mdt"], "index", "svname",
                               "mgsnode": [[nid, ...], ...] | None, "uuid", "replace",
                               "mgs_db": {fsname: {svname: uuid}}}}   # MGS targets only

"mgs_db" is the MGS's configuration database: a target registers its svname there on its first
mount, it lives on the MGS's own device (so a reformat of that device forgets it) and
`lctl erase_lcfg` drops one filesystem from it.

A mount is an entry in state["mounts"][host]:

    {"source", "dir", "fstype": "lustre", "kind": "target" | "client", "options": [...],
     "device": path (targets), "fsname", "subdir", "mgs": [host, device] (clients), "instance",
     "root": the directory shown, "covered": where the covered mount point waits (clients)}

A filesystem's files live in its store, <site>/lustre-fs/<fsname>.<n> (n: the format of its
MDT0000). While a client is mounted its mount point is a link to the store (or to the fileset
inside it) and the directory it covers is set aside; umount puts that directory back. So what
is written through one mount is seen through every other, and an unmounted mount point is the
empty directory it was. Several hosts may mount the filesystem at one path (every server's
staging client at the primary's fs_path): each has its own entry, and the path leads into the
store until the last of them is unmounted ("covered" passes to one still mounted).
"""

from __future__ import annotations

import os
import re
from typing import Iterator

from disk_state import devices, mounts
from lnet import BadNid, parse_nid
from sitelib import Refused, Site

__all__ = [
    "RELEASES",
    "VERSIONS",
    "release",
    "max_index",
    "connect_data",
    "BRW_DEFAULT",
    "MODRPCS_DEFAULT",
    "fsname_error",
    "svname",
    "lustre_of",
    "resolver",
    "host_nids",
    "nid_hosts",
    "running_mgs",
    "mounted_targets",
    "registered",
    "client_mount_at",
    "mount_path",
    "fs_store",
    "MAXFSNAME",
    "MAX_INDEX",
]

MAXFSNAME = 8  # LUSTRE_MAXFSNAME, lustre/include/uapi/linux/lustre/lustre_user.h
MAX_INDEX = 0xFFE0 - 1  # LOV_V1_INSANE_STRIPE_INDEX (LOV_ALL_STRIPES_WIDE - 1), master

#: the Lustre releases the stand-ins follow; site.json {"lustre": {"release": ...}} picks one
RELEASES = ("2.15", "2.16", "master")
#: the version each release's tools print (the tags the rules were read at)
VERSIONS = {"2.15": "2.15.7", "2.16": "2.16.1", "master": "2.17.57"}


def release(site: Site) -> str:
    """The Lustre release this site runs (default 2.15, the LTS most sites run)."""
    chosen = str(site.facts.get("lustre", {}).get("release", "2.15"))
    if chosen not in RELEASES:
        raise Refused(
            f"stand-in: site.json lustre.release '{chosen}' is not one of {', '.join(RELEASES)}", 2
        )
    return chosen


#: what a client is told at connection when nobody tuned the server: an OST's brw_size
#: (DT_DEF_BRW_SIZE, v2_15_7 lustre/include/lustre_net.h:108, v2_16_1 :99) and an MDT's limit
#: of modifying RPCs per client (the mdt module's max_mod_rpcs_per_client, v2_15_7
#: lustre/mdt/mdt_handler.c:70; mdt.*.max_mod_rpcs_in_flight from 2.16, mdt_handler.c:6399)
BRW_DEFAULT = 4 << 20
MODRPCS_DEFAULT = 8


def connect_data(site: Site, state: dict, known: dict) -> dict:
    """What each running target of a filesystem tells a client that connects now, by svname.

    An MDT answers ocd_maxmodrpcs: on 2.15 the module parameter max_mod_rpcs_per_client
    (site.json lustre.max_mod_rpcs_per_client, default 8; v2_15_7 mdt_handler.c:6621), from
    2.16 the MDT's own mdt.*.max_mod_rpcs_in_flight (v2_16_1 mdt_handler.c:7031-7040). An OST
    answers its obdfilter.*.brw_size (ocd_brw_size). Set later, neither reaches a client
    already connected."""
    chosen = release(site)
    module = int(site.facts.get("lustre", {}).get("max_mod_rpcs_per_client", MODRPCS_DEFAULT))
    tunables = state.get("lustre", {}).get("tunables", {})
    running = {info["uuid"] for _, _, info in mounted_targets(state)}
    out = {}
    for name, uuid in known.items():
        if uuid not in running:
            continue
        mine = tunables.get(str(uuid), {})
        if "-OST" in name:
            out[name] = {"brw_size": mine.get("brw_size", BRW_DEFAULT)}
        else:
            limit = module if chosen == "2.15" else mine.get("max_mod_rpcs_in_flight", module)
            out[name] = {"maxmodrpcs": limit}
    return out


def max_index(chosen: str) -> int:
    """The highest --index mkfs.lustre takes: below INDEX_UNASSIGNED (0xffff) on 2.15 and 2.16
    (v2_15_7 lustre/utils/mkfs_lustre.c:518, v2_16_1 mkfs_lustre.c:473; mount_utils.h:80),
    at most LOV_V1_INSANE_STRIPE_INDEX on master (mkfs_lustre.c:524)."""
    return MAX_INDEX if chosen == "master" else 0xFFFF - 1


def fsname_error(name: str) -> str | None:
    """mkfs.lustre's complaint about a filesystem name (1-8 of [A-Za-z0-9_-]), or None."""
    if not 1 <= len(name) <= MAXFSNAME:
        return f"filesystem name must be 1-{MAXFSNAME} chars"
    bad = re.search(r"[^A-Za-z0-9_-]", name)
    return f"char '{bad.group()}' not allowed in filesystem name" if bad else None


def svname(fsname: str, kinds: list[str], index: int | None) -> str:
    """The target's server name: fs1-MDT0000, fs1-OST001f, or MGS for a standalone MGS.

    A target formatted without --index gets the unassigned index, 0xffff, as mkfs.lustre does.
    """
    if "mdt" in kinds or "ost" in kinds:
        number = 0xFFFF if index is None else index
        return f"{fsname}-{'MDT' if 'mdt' in kinds else 'OST'}{number:04x}"
    return "MGS"


def lustre_of(state: dict, host: str, path: str) -> dict | None:
    """The Lustre format of a device, or None."""
    fs = devices(state, host).get(path, {}).get("fs") or {}
    return fs.get("lustre")


def resolver(site: Site):
    """Host-name resolution for NIDs: a site host's name stands for its NID's address."""
    facts = site.facts["hosts"]

    def resolve(name: str) -> str | None:
        nid = facts.get(name, {}).get("nid", "")
        return nid.partition("@")[0] or None

    return resolve


def host_nids(site: Site, host: str) -> set[str]:
    """The host's NIDs in canonical form (site.json "nid", comma-separated if several)."""
    raw = site.facts["hosts"].get(host, {}).get("nid", "")
    nids = set()
    for nid in filter(None, raw.split(",")):
        try:
            nids.add(parse_nid(nid.strip()))
        except BadNid:
            nids.add(nid.strip())
    return nids


def nid_hosts(site: Site, nids) -> list[str]:
    """The site's hosts owning any of these canonical NIDs."""
    wanted = set(nids)
    return [host for host in site.facts["hosts"] if host_nids(site, host) & wanted]


def mounted_targets(state: dict) -> Iterator[tuple[str, dict, dict]]:
    """Every mounted Lustre target in the site: (host, mount entry, its Lustre format)."""
    for host, entries in state.get("mounts", {}).items():
        for entry in entries:
            if entry.get("kind") == "target":
                info = lustre_of(state, host, entry["device"])
                if info:
                    yield host, entry, info


def running_mgs(site: Site, state: dict, nodes: list[list[str]]):
    """The mounted MGS answering at any NID of an MGS specification: (host, entry, info)."""
    hosts = nid_hosts(site, [nid for node in nodes for nid in node])
    for host, entry, info in mounted_targets(state):
        if host in hosts and "mgs" in info["kinds"]:
            return host, entry, info
    return None


def registered(mgs_info: dict, fsname: str) -> dict:
    """The targets of `fsname` the MGS knows: {svname: uuid}."""
    return mgs_info.setdefault("mgs_db", {}).get(fsname, {})


def mount_path(path: str) -> str:
    """A mount point as the mount table names it: its parent resolved, itself not.

    A client mount point is replaced by a link into the filesystem's store while mounted (see
    lustre_mount.py), so resolving the mount point itself would name the store instead.
    """
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def fs_store(site: Site, fsname: str, mdt0: int) -> str:
    """Where a filesystem's files live: one directory per format of its MDT0000."""
    return os.path.join(site.dir, "lustre-fs", f"{fsname}.{mdt0}")


def client_mount_at(state: dict, host: str, path: str) -> tuple[dict, str] | None:
    """The Lustre client mount on `host` holding `path`, and the path inside the filesystem.

    The path is looked up the way the kernel walks it: through this host's own mount points,
    the innermost first, so a path under another host's mount point is not found here.
    """
    points = {entry["dir"]: entry for entry in mounts(state, host) if entry.get("kind") == "client"}
    path = os.path.abspath(path)
    rest: list[str] = []
    while True:
        entry = points.get(mount_path(path))
        if entry is not None:
            inside = "/".join(p for p in [entry.get("subdir", "")] + rest[::-1] if p)
            return entry, "/" + inside
        parent = os.path.dirname(path)
        if parent == path:
            return None
        rest.append(os.path.basename(path))
        path = parent
