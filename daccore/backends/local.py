"""The `local` backend: a buffer's bricks on one server become one filesystem, xfs on a single
brick and btrfs (data raid0, metadata raid1) across several, mounted nodev,nosuid under the
host's fs_root (`<fs_root>/<buffer>/mnt`, in a directory only the buffer's owner may pass:
daccore.records.layout). The job's directories are owned by the job's user, mode 0700.

Compute nodes see the buffer through bind mounts made on the storage server under each node's
root (`node_root`, default mount_root: near-node flash, where the server is the node; the local
DAC gives every fake node its own root). Bind mounts keep the source's nodev,nosuid.

    <node root>/<daccore.records.layout path>  <- <fs>/striped, or <fs>/private/<node>
    <fs>/swap/<node>                      swap file of that node, when the job asked for swap
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from daccore.backends.base import Backend, node_mounts, register
from daccore.records.layout import server_mount

if TYPE_CHECKING:
    from typing import TypedDict

    from daccore.backends.base import Vars
    from daccore.records.models import Buffer

    class _Mounts(TypedDict):
        binds: dict[str, tuple[str, str]]  # target -> (source, node root)
        swaps: dict[str, int]  # swap file -> bytes
        dirs: dict[str, None]  # nodes' private directories, in order


__all__ = ["LocalBackend"]


@register("local")
class LocalBackend(Backend):
    def variables(
        self, buffer: Buffer, step: str, attached: dict[str, list[str]] | None = None
    ) -> Vars:
        host = self.config.hosts[self.host]
        fs_path = server_mount(host.fs_root, buffer.name)
        devices = [self.device(buffer, b) for b in buffer.allocation.bricks if b.host == self.host]
        if len(devices) == 1:
            mkfs = ["mkfs.xfs", "-f", "-q", "-L", _label(buffer.name), devices[0]]
            mount_options = "nodev,nosuid"
        else:
            mkfs = [
                "mkfs.btrfs",
                "-f",
                "-q",
                "-L",
                _label(buffer.name),
                "-d",
                "raid0",
                "-m",
                "raid1",
                *devices,
            ]
            # name every member, so the mount works even before a `btrfs device scan`
            mount_options = ",".join(["nodev", "nosuid"] + [f"device={d}" for d in devices])
        access = ["striped"] if buffer.persistent else buffer.request.access.value.split(",")
        want = self._mounts(buffer, fs_path, access, buffer.attachments)
        have = self._mounts(buffer, fs_path, access, attached or {})
        if step == "delete":
            # whatever may be mounted: what this host recorded as attached (a node mount an
            # earlier unmount could not remove stays there until it is gone) and what the
            # spec still attaches (a step cut short); merged kind by kind, or the spec's empty
            # binds after post_run would hide the recorded ones and none would be retried
            have = {
                "binds": {**have["binds"], **want["binds"]},
                "swaps": {**have["swaps"], **want["swaps"]},
                "dirs": {**have["dirs"], **want["dirs"]},
            }
            want = {"binds": {}, "swaps": {}, "dirs": {}}
        user = {"owner": buffer.owner_uid, "group": buffer.owner_gid, "mode": "0700"}
        return {
            "buffer": buffer.name,
            "devices": devices,
            "mkfs_argv": mkfs,
            "fs_path": fs_path,
            "buffer_dir": os.path.dirname(fs_path),  # closed to all but the owner
            "mount_options": mount_options,
            "owner_uid": buffer.owner_uid,
            "owner_gid": buffer.owner_gid,
            "job_dirs": access,
            "attach": {
                "fs_path": fs_path,  # the root-owned anchor of every path inside the buffer
                "dirs": [{"path": p, **user} for p in sorted(want["dirs"])],
                "binds": [
                    {"source": s, "target": t, "root": r}
                    for t, (s, r) in sorted(want["binds"].items())
                ],
                "unbinds": [
                    {"target": t, "root": r}
                    for t, (_, r) in sorted(have["binds"].items())
                    if t not in want["binds"]
                ],
                "swaps": [{"path": p, "size": n} for p, n in sorted(want["swaps"].items())],
                "unswaps": [p for p in sorted(have["swaps"]) if p not in want["swaps"]],
            },
        }

    def _mounts(
        self, buffer: Buffer, fs_path: str, access: list[str], attachments: dict[str, list[str]]
    ) -> _Mounts:
        binds: dict[str, tuple[str, str]] = {}  # target -> (source, node root)
        swaps: dict[str, int] = {}
        dirs: dict[str, None] = {}
        root_of = self.config.node_mount_root
        for node, parts in node_mounts(buffer, attachments, root_of, access).items():
            for target, part in parts.items():
                source = os.path.join(fs_path, part)
                if part != "striped":
                    dirs[source] = None  # a node's private directory
                binds[target] = (source, root_of(node))
            if buffer.request.swap and not buffer.persistent:
                swaps[os.path.join(fs_path, "swap", node)] = buffer.request.swap
        return {"binds": binds, "swaps": swaps, "dirs": dirs}


def _label(name: str) -> str:
    return f"dac-{name}"[:12]  # xfs labels hold 12 characters
