"""The `lustre` backend: one Lustre filesystem per buffer across the servers holding its bricks.

Every server of the buffer is MDS, OSS and client for staging, as in the Data Accelerator
reference architecture (each server's dacd copies its share of a split stage, issue 35).
Each brick gets a GPT label and an OST partition; the first `max_mdts_per_host` bricks of
each server (at most `max_mdts` in all) also get an MDT partition of `mdt_size`, placed
first. MDT0 is on the primary. The MGS is either per buffer (sharing MDT0's device, so it
lives and dies with the buffer) or a shared MGS the site runs; targets and clients always
name the same MGS NID, `mgs_nid`.

    servers   mkfs.lustre, mount -t lustre <partition> <target_root>/<fsname>/<mdtN|ostN>,
              then mount -t lustre -o flock,nodev,nosuid <mgs_nid>:/<fsname> <fs_path> (the
              primary's <fs_root>/<buffer>/mnt, daccore.records.layout.server_mount, the same
              path on every server), in <fs_root>/<buffer>/, root's, 0700, that the buffer's
              owner alone may pass (an ACL: `passable_to`)
    primary   then, once: striped/ (lfs setstripe -c -1: over every OST), 0700, the user's, and
              private/, root's, 0711 (each node's private/<node> is the user's)
    clients   mount -t lustre -o flock,nodev,nosuid <mgs_nid>:/<fsname>/striped (or
              /private/<node>: a subdirectory mount) at the daccore.records.layout path, below
              <mount root>/<job>/ (and persistent/), root's, 0700, closed the same way

No other user reaches a buffer's mounts: an O_PATH open needs no permission on its target, only
search permission on the directories above it, so a mount point another user could pass to
could be held open (its unmount kept busy) and measured with statvfs (issue 45).

The fsname is 8 lower-case letters derived from the buffer's name and creation time: the same
on every run of every step, and a new one for a new buffer of the same name.
"""

from __future__ import annotations

import hashlib
import os
import string
from typing import TYPE_CHECKING

from daccore.backends.base import Backend, prune_list, register, templated
from daccore.records.layout import server_mount

if TYPE_CHECKING:
    from daccore.backends.base import Vars
    from daccore.records.models import Buffer
    from daccore.settings.config import LustreSettings

__all__ = ["LustreBackend", "fsname", "passable_to", "IO500_TUNING"]

MiB = 1 << 20
CLIENT_OPTIONS = "flock,nodev,nosuid"
#: seconds `lctl ping` waits for the shared MGS (its default, 1 s, is short for a cold o2ib
#: peer: the connection is set up by the first ping)
PING_TIMEOUT = "10"

#: the lctl settings of NHR@FAU's IO500 run (Lustre 2.16 on xiRAID; docs/backends.md,
#: "tuning: io500"): (side, parameter pattern, value).
#: Set without -P, per buffer, with the buffer's fsname in the pattern: they go with the mount.
IO500_TUNING = [
    ("server", "obdfilter.{fs}-OST*.brw_size", "16"),
    ("server", "obdfilter.{fs}-OST*.precreate_batch", "1024"),
    ("client", "osc.{fs}-*.max_pages_per_rpc", "4096"),
    ("client", "osc.{fs}-*.max_rpcs_in_flight", "128"),
    ("client", "mdc.{fs}-*.max_rpcs_in_flight", "128"),
    ("client", "mdc.{fs}-*.max_mod_rpcs_in_flight", "{mod_rpcs}"),
    ("client", "llite.{fs}-*.checksum_pages", "0"),
    ("client", "osc.{fs}-*.checksums", "0"),
    ("client", "mdc.{fs}-*.checksums", "0"),
    ("client", "ldlm.namespaces.{fs}-*.lru_size", "12800"),
    ("client", "ldlm.namespaces.{fs}-*.lru_max_age", "1000"),
    ("client", "llite.{fs}-*.max_read_ahead_mb", "2048"),
    ("client", "osc.{fs}-*.short_io_bytes", "65536"),
]
#: A client may not have more modifying RPCs in flight than its MDT allowed when it connected
#: (ERANGE). From Lustre 2.16 the MDT's limit is its own parameter, raised here on each MDS
#: before any client mounts; 2.15 has only the mdt module parameter max_mod_rpcs_per_client,
#: the site's (`lustre.max_mod_rpcs_per_client` says what it is).
MDT_MOD_RPCS = "mdt.{fs}-MDT*.max_mod_rpcs_in_flight"
IO500_MOD_RPCS = 127


def passable_to(uid: int) -> str:
    """The access ACL (`setfacl --set`) of a root's directory on the way to a buffer's mounts:
    root may do all, the buffer's owner may only pass through (not list, not write), no one
    else may do anything. The mask (--x, the mode's group bits) is setfacl's to compute."""
    return f"u::rwx,u:{uid}:--x,g::---,o::---"


def fsname(buffer: Buffer) -> str:
    digest = hashlib.sha256(f"{buffer.name}/{buffer.created_at!r}".encode()).digest()
    return "".join(string.ascii_lowercase[b % 26] for b in digest[:8])


#: persistent links to whole disks whose partitions udev links as <link>-part<N>
#: (systemd's rules.d/60-persistent-storage.rules)
PERSISTENT_LINKS = ("by-id", "by-path", "by-diskseq")


def partition(disk: str, number: int) -> str:
    """A disk's partition as the kernel names it (nvme0n1 -> nvme0n1p1, sda -> sda1), or as
    udev links it when the disk is named by a persistent link: /dev/disk/by-id/nvme-X ->
    /dev/disk/by-id/nvme-X-part1."""
    parent = os.path.dirname(disk)
    if (
        os.path.basename(parent) in PERSISTENT_LINKS
        and os.path.basename(os.path.dirname(parent)) == "disk"
    ):
        return f"{disk}-part{number}"
    return f"{disk}{'p' if disk[-1].isdigit() else ''}{number}"


@register("lustre")
class LustreBackend(Backend):
    one_run_for_all_hosts = True
    #: which servers a stage is split across (issue 35, dacd/staging/reach.py): create.yml mounts
    #: the buffer's client at fs_path on every server, so each copies its share there
    split_reach = "client"

    def _settings(self, buffer: Buffer) -> LustreSettings:
        s = self.config.pools[buffer.request.pool].lustre
        assert s is not None  # a lustre pool has its settings (validated at load)
        return s

    def _servers(self, buffer: Buffer) -> list[str]:
        primary = buffer.allocation.primary_host
        return [primary] + [h for h in buffer.allocation.hosts if h != primary]

    def mgs_nid(self, buffer: Buffer) -> str:
        mgs = self._settings(buffer).mgs
        if mgs == "per_buffer":
            return self.config.lnet_nid(buffer.allocation.primary_host, buffer.request.pool)
        return mgs.nid

    def targets(self, buffer: Buffer) -> dict[str, Vars]:
        """Per server: its disks' partitioning and its targets, in mount order."""
        s = self._settings(buffer)
        fs, nid = fsname(buffer), self.mgs_nid(buffer)
        per_buffer_mgs = s.mgs == "per_buffer"
        mdt_end = 1 + -(-s.mdt_size // MiB)
        out: dict[str, Vars] = {}
        mdts = osts = 0
        for host in self._servers(buffer):
            disks, targets = [], []
            for i, ref in enumerate(b for b in buffer.allocation.bricks if b.host == host):
                device = self.device(buffer, ref)
                with_mdt = i < s.max_mdts_per_host and mdts < s.max_mdts
                parted = ["parted", "--script", device, "mklabel", "gpt"]
                if with_mdt:
                    parted += [
                        "mkpart",
                        "mdt",
                        "1MiB",
                        f"{mdt_end}MiB",
                        "mkpart",
                        "ost",
                        f"{mdt_end}MiB",
                        "100%",
                    ]
                    mgs = per_buffer_mgs and mdts == 0
                    targets.append(
                        _target(
                            fs,
                            "mdt",
                            mdts,
                            partition(device, 1),
                            None if mgs else nid,
                            s.target_root,
                            mgs,
                        )
                    )
                    mdts += 1
                else:
                    parted += ["mkpart", "ost", "1MiB", "100%"]
                disks.append(
                    {
                        "device": device,
                        "parted": parted,
                        "partitions": [
                            partition(device, n) for n in range(1, 3 if with_mdt else 2)
                        ],
                    }
                )
                targets.append(
                    _target(
                        fs, "ost", osts, partition(device, 2 if with_mdt else 1), nid, s.target_root
                    )
                )
                osts += 1
            out[host] = {
                "disks": disks,
                "targets": targets,
                "server_tuning": self.tuning(
                    buffer, "server", any(t["kind"] != "ost" for t in targets)
                ),
            }
        return out

    def tuning(self, buffer: Buffer, side: str, has_mdt: bool = False) -> list[str]:
        """The profile's `lctl set_param` words for a client, or for a server (with its MDT's
        limit first, where the release has one)."""
        s = self._settings(buffer)
        if s.tuning == "none":
            return []
        fs = fsname(buffer)
        mod_rpcs = (
            IO500_MOD_RPCS
            if s.release != "2.15"
            else min(IO500_MOD_RPCS, s.max_mod_rpcs_per_client)
        )
        words = [
            f"{name.format(fs=fs)}={value.format(mod_rpcs=mod_rpcs)}"
            for where, name, value in IO500_TUNING
            if where == side
        ]
        if side == "server" and has_mdt and s.release != "2.15":
            words.insert(0, f"{MDT_MOD_RPCS.format(fs=fs)}={IO500_MOD_RPCS}")
        return words

    def variables(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        s, primary = self._settings(buffer), buffer.allocation.primary_host
        fs, nid = fsname(buffer), self.mgs_nid(buffer)
        fs_path = server_mount(self.config.hosts[primary].fs_root, buffer.name)
        return {
            "buffer": buffer.name,
            "fsname": fs,
            "mgs_nid": nid,
            "shared_mgs": s.mgs != "per_buffer",
            "ping_timeout": PING_TIMEOUT,
            "fs_path": fs_path,
            "buffer_dir": os.path.dirname(fs_path),
            "owner_acl": passable_to(buffer.owner_uid),
            "fs_source": f"{nid}:/{fs}",
            "client_options": CLIENT_OPTIONS,
            "target_dir": os.path.join(s.target_root, fs),
            "owner_uid": buffer.owner_uid,
            "owner_gid": buffer.owner_gid,
            "job_dirs": ["striped"]
            if buffer.persistent
            else buffer.request.access.value.split(","),
            "client_tuning": self.tuning(buffer, "client"),
        }

    def inventory(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        s, primary = self._settings(buffer), buffer.allocation.primary_host
        fs, nid = fsname(buffer), self.mgs_nid(buffer)
        access = ["striped"] if buffer.persistent else buffer.request.access.value.split(",")
        want, clients = self.client_changes(buffer, step, attached, access)
        for name, node in clients.items():  # a Lustre subdirectory mount of the node's part
            node["node_root"] = self.config.node_mount_root(name)
            node["closed"] = closed_dirs(list(node["mounts"]), node["node_root"])
            node["mounts"] = [
                {"target": t, "source": f"{nid}:/{fs}/{p}"} for t, p in node["mounts"].items()
            ]
        servers = {h: {**self.host_vars(h), **t} for h, t in self.targets(buffer).items()}
        # the primary makes each node's private directory before that node mounts it
        servers[primary]["private_dirs"] = sorted(
            {part for parts in want.values() for part in parts.values() if part != "striped"}
        )
        groups = {
            "servers": {"hosts": servers},
            "primary": {"hosts": {primary: {}}},
            "clients": {"hosts": clients},
        }
        if s.mgs != "per_buffer":
            groups["mgs"] = {"hosts": {s.mgs.host: templated(dict(s.mgs.ansible_vars))}}
        return {"all": {"children": groups}}


def closed_dirs(mount_points: list[str], node_root: str) -> list[str]:
    """The directories between a node's mount root and these mount points (`<job>/`,
    `<job>/persistent/`), parents first: each is made root's, 0700, and `passable_to` the
    buffer's owner before anything is mounted below it."""
    below = set(prune_list(mount_points, node_root)) - set(mount_points)
    return sorted(below, key=lambda d: (d.count(os.sep), d))


def _target(
    fs: str, kind: str, index: int, device: str, mgsnode: str | None, root: str, mgs: bool = False
) -> Vars:
    argv = [
        "mkfs.lustre",
        *(["--mgs"] if mgs else []),
        f"--{kind}",
        "--reformat",
        f"--fsname={fs}",
        f"--index={index}",
        *([f"--mgsnode={mgsnode}"] if mgsnode else []),
        device,
    ]
    # role: the order Lustre starts them in (mdt0 with the MGS, the other MDTs, the OSTs);
    # they stop in the manual's order: the MDTs, MDT0 and the MGS, then the OSTs
    role = "ost" if kind == "ost" else "mdt0" if index == 0 else "mdt"
    return {
        "kind": "mgs" if mgs else kind,
        "role": role,
        "index": index,
        "device": device,
        "mkfs": argv,
        "mount_point": os.path.join(root, fs, f"{kind}{index}"),
    }
