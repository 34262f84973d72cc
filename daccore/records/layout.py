"""Where a compute node sees buffers, under its mount root: the one place paths_for (what
Slurm puts in the job's environment) and every backend's mount step agree on.

    <mount root>/<job>/striped            the job's buffer, shared by its nodes
    <mount root>/<job>/private            the job's buffer, this node's own directory
    <mount root>/<job>/persistent/<name>  a persistent buffer the job attaches

Persistent buffers live under the job, so two jobs on one node attaching the same buffer never
share (or unmount) each other's mount point.
"""

from __future__ import annotations

import os

__all__ = ["mount_path"]


def mount_path(root: str, job: str, buffer: str, persistent: bool, kind: str = "striped") -> str:
    if persistent:
        return os.path.join(root, job, "persistent", buffer)
    return os.path.join(root, job, kind)
