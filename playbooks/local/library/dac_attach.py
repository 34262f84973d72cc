#!/usr/bin/python
"""Make a storage server's compute-node mounts of one buffer match what the spec asks for.

One task instead of a loop of command tasks: ansible costs a module run per loop item, and
this runs at every job start and end (docs/performance.md). Idempotent: every action first
checks whether it is already done, so a run cut short by a killed dacd is simply run again.
Order matters: swap off and unmount before anything is removed; directories before binds.
"""

from __future__ import annotations

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {_unescape(line.split()[4]) for line in f}


def active_swaps() -> set[str]:
    with open("/proc/swaps") as f:
        return {_unescape(line.split()[0]) for line in list(f)[1:] if line.strip()}


def prune(path: str, root: str) -> None:
    """Remove `path` and its empty parents, stopping at `root`."""
    root = os.path.normpath(root)
    path = os.path.normpath(path)
    while path.startswith(root + os.sep):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:  # not empty (another job's mounts) or still a mount point
            return
        path = os.path.dirname(path)


def main() -> None:
    module = AnsibleModule(argument_spec={
        "dirs": {"type": "list", "elements": "dict", "default": []},
        "binds": {"type": "list", "elements": "dict", "default": []},
        "unbinds": {"type": "list", "elements": "dict", "default": []},
        "swaps": {"type": "list", "elements": "dict", "default": []},
        "unswaps": {"type": "list", "elements": "str", "default": []},
    })
    p = module.params
    changed = []

    def run(argv: list[str]) -> None:
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            module.fail_json(msg=f"{' '.join(argv)}: {(r.stderr or r.stdout).strip()}",
                             rc=r.returncode, changed=changed)
        changed.append(" ".join(argv))

    swaps = active_swaps()
    for path in p["unswaps"]:
        if path in swaps:
            run(["swapoff", path])
        if os.path.exists(path):
            os.unlink(path)
            changed.append(f"rm {path}")
    mounted = mount_points()
    for u in p["unbinds"]:
        if u["target"] in mounted:
            run(["umount", u["target"]])
        prune(u["target"], u["root"])
    for d in p["dirs"]:
        if not os.path.isdir(d["path"]):
            os.makedirs(d["path"], mode=0o700)
            changed.append(f"mkdir {d['path']}")
        os.chown(d["path"], int(d["owner"]), int(d["group"]))
        os.chmod(d["path"], int(d["mode"], 8))
    for b in p["binds"]:
        if b["target"] in mounted:
            continue
        os.makedirs(b["target"], mode=0o755, exist_ok=True)
        run(["mount", "--bind", b["source"], b["target"]])
    for s in p["swaps"]:
        if s["path"] in swaps:
            continue
        os.makedirs(os.path.dirname(s["path"]), mode=0o700, exist_ok=True)
        if os.path.exists(s["path"]):  # a run cut short: start the file afresh
            os.unlink(s["path"])
        fd = os.open(s["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, int(s["size"]))
        except OSError as e:
            os.close(fd)
            os.unlink(s["path"])
            module.fail_json(msg=f"swap file {s['path']}: {e.strerror}", changed=changed)
        os.close(fd)
        run(["mkswap", "-q", s["path"]])
        run(["swapon", s["path"]])
    module.exit_json(changed=bool(changed), actions=changed)


if __name__ == "__main__":
    main()
