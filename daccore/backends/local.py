"""The `local` backend: a buffer's bricks on one server become one filesystem, xfs on a single
brick and btrfs (data raid0, metadata raid1) across several, mounted nodev,nosuid under the
host's fs_root. The job's directories are owned by the job's user, mode 0700.
"""

from __future__ import annotations

import os

from daccore.backends import Backend, register


@register("local")
class LocalBackend(Backend):
    def variables(self, buffer, step: str) -> dict:
        host = self.config.hosts[self.host]
        devices = [b.device for b in buffer.allocation.bricks if b.host == self.host]
        if len(devices) == 1:
            mkfs = ["mkfs.xfs", "-f", "-q", "-L", _label(buffer.name), devices[0]]
            mount_options = "nodev,nosuid"
        else:
            mkfs = ["mkfs.btrfs", "-f", "-q", "-L", _label(buffer.name), "-d", "raid0",
                    "-m", "raid1", *devices]
            # name every member, so the mount works even before a `btrfs device scan`
            mount_options = ",".join(["nodev", "nosuid"] + [f"device={d}" for d in devices])
        access = buffer.request.access.value.split(",")
        return {
            "buffer": buffer.name,
            "devices": devices,
            "mkfs_argv": mkfs,
            "fs_path": os.path.join(host.fs_root, buffer.name),
            "mount_options": mount_options,
            "owner_uid": buffer.owner_uid,
            "owner_gid": buffer.owner_gid,
            "job_dirs": [d for d in ("striped", "private") if d in access],
        }


def _label(name: str) -> str:
    return f"dac-{name}"[:12]  # xfs labels hold 12 characters
