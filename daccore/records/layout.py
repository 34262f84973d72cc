"""Where a compute node sees buffers, under its mount root: the one place paths_for (what
Slurm puts in the job's environment) and every backend's mount step agree on.

    <mount root>/<job>/striped            the job's buffer, shared by its nodes
    <mount root>/<job>/private            the job's buffer, this node's own directory
    <mount root>/<job>/persistent/<name>  a persistent buffer the job attaches

Persistent buffers live under the job, so two jobs on one node attaching the same buffer never
share (or unmount) each other's mount point.

Where a storage server mounts a buffer's filesystem under its fs_root (local, and lustre's
staging client; daos's staging dfuse is at `<fs_root>/<buffer>/striped`):

    <fs_root>/<buffer>/       root's, 0700, passable by the buffer's owner alone (an ACL)
    <fs_root>/<buffer>/mnt    the filesystem's mount point; its top root's, 0711

A mount point straight in fs_root (root's 0711, which every user passes through) could be
opened O_PATH by any user, which needs no permission on the mount point itself: a descriptor
that keeps the filesystem busy, and statvfs showing its owner's usage (issue 45).
"""

from __future__ import annotations

import os

__all__ = ["mount_path", "server_mount"]


def mount_path(root: str, job: str, buffer: str, persistent: bool, kind: str = "striped") -> str:
    if persistent:
        return os.path.join(root, job, "persistent", buffer)
    return os.path.join(root, job, kind)


def server_mount(fs_root: str, buffer: str) -> str:
    """The mount point of `buffer`'s filesystem on a server (local, lustre)."""
    return os.path.join(fs_root, buffer, "mnt")
