"""The block-device and mount state every disk and Lustre stand-in shares.

State (in site.state(), per host, keyed by the device's absolute path):

    state["devices"][host][path] = {"label": "gpt" | "msdos" | ... | None,
                                    "parts": [{"number", "name", "fs_type", "start", "end",
                                               "path", "flags"}],   # sectors, inclusive
                                    "fs": None | {"type": "ext4", "lustre": {...}}}
    state["mounts"][host] = [{"source", "dir", "fstype", ...}]   (see lustre_model.py)

Device placeholders are real files; a partition's placeholder sits next to its disk, named the
way the kernel and udev name it (nvme0n1p1, loop3p1, sda1; disk/by-id/<id>-part1).
"""

from __future__ import annotations

import os

__all__ = ["devices", "device", "mounts", "busy", "partition_of", "partition_path", "signatures"]


def devices(state: dict, host: str) -> dict:
    return state.setdefault("devices", {}).setdefault(host, {})


def device(state: dict, host: str, path: str) -> dict:
    """The state of one device (created blank: no label, no partitions, no filesystem)."""
    return devices(state, host).setdefault(path, {"label": None, "parts": [], "fs": None})


def mounts(state: dict, host: str) -> list:
    return state.setdefault("mounts", {}).setdefault(host, [])


def partition_path(disk: str, number: int) -> str:
    """Where partition `number` of `disk` appears: the kernel's name next to a kernel-named disk
    (a 'p' when the disk name ends in a digit: nvme0n1p1, sda1), and udev's link next to a
    disk named by a persistent link: <link>-part<N> under /dev/disk/by-id, by-path and
    by-diskseq (systemd v252, Debian 12: rules.d/60-persistent-storage.rules, the
    `ENV{DEVTYPE}=="partition"` rules that add "-part%n")."""
    parent = os.path.dirname(disk)
    if (
        os.path.basename(parent) in ("by-id", "by-path", "by-diskseq")
        and os.path.basename(os.path.dirname(parent)) == "disk"
    ):
        return f"{disk}-part{number}"
    return f"{disk}p{number}" if disk[-1:].isdigit() else f"{disk}{number}"


def partition_of(state: dict, host: str, path: str) -> str | None:
    """The disk holding partition `path`, or None when `path` is a whole disk."""
    for disk, dev in devices(state, host).items():
        if any(part["path"] == path for part in dev["parts"]):
            return disk
    return None


def busy(state: dict, host: str, path: str) -> bool:
    """Whether the kernel holds the device (or, for a disk, one of its partitions) open."""
    held = {entry.get("device") for entry in mounts(state, host)}
    parts = [part["path"] for part in devices(state, host).get(path, {}).get("parts", [])]
    return path in held or any(part in held for part in parts)


def signatures(dev: dict) -> list[tuple[str, str, str]]:
    """(type, offset, magic bytes) as blkid finds them: partition table first, then filesystem."""
    found = []
    if dev["label"] == "gpt":
        found += [("gpt", "0x00000200", "45 46 49 20 50 41 52 54"), ("PMBR", "0x000001fe", "55 aa")]
    elif dev["label"] == "msdos":
        found.append(("dos", "0x000001fe", "55 aa"))
    if dev["fs"]:
        found.append((dev["fs"]["type"], "0x00000438", "53 ef"))
    return found
