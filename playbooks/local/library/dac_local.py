#!/usr/bin/python
# WANT_JSON
"""The local backend's work on a storage server, one task per lifecycle step.

A plain "WANT_JSON" module (arguments in a JSON file, result as JSON on stdout) using only the
standard library: Ansible runs it without building an AnsiballZ payload or importing its
module_utils, which costs 0.6 s per task on a 2-core machine (docs/performance.md). Every action
checks before it acts, so a run cut short by a killed dacd is simply run again. Commands run
from argv lists, never through a shell.

    action: create   mkfs (unless mounted), mount nodev,nosuid, the job's directories
    action: attach   compute-node bind mounts and swap files, to match the spec
    action: delete   attach (to nothing), unmount, wipe the bricks, remove the mount point
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


class Failed(Exception):
    def __init__(self, msg: str, rc: int = 1, stderr: str = ""):
        super().__init__(msg)
        self.msg, self.rc, self.stderr = msg, rc, stderr


def _unescape(path: str) -> str:
    # /proc escapes space, tab, newline and backslash as octal
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {_unescape(line.split()[4]) for line in f}


def active_swaps() -> set[str]:
    with open("/proc/swaps") as f:
        return {_unescape(line.split()[0]) for line in list(f)[1:] if line.strip()}


def run(argv: list[str], done: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        # one line for the user (tools like mkfs put the reason first, then their usage); the
        # whole output goes to the admin
        output = (r.stderr or r.stdout).strip()
        first = next((line for line in output.splitlines() if line.strip()), "no output")
        raise Failed(f"{' '.join(argv)}: {first.strip()}", r.returncode, output)
    done.append(" ".join(argv))


def owned_dir(path: str, owner: int, group: int, mode: int, done: list[str]) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, mode=mode)
        done.append(f"mkdir {path}")
    os.chown(path, owner, group)
    os.chmod(path, mode)


def prune(path: str, root: str) -> None:
    """Remove `path` and its empty parents, stopping at `root`."""
    root, path = os.path.normpath(root), os.path.normpath(path)
    while path.startswith(root + os.sep):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:  # not empty (another job's mounts) or still a mount point
            return
        path = os.path.dirname(path)


def create(a: dict, done: list[str]) -> None:
    fs = a["fs_path"]
    if fs not in mount_points():
        run(a["mkfs_argv"], done)
        os.makedirs(fs, mode=0o755, exist_ok=True)
        run(["mount", "-o", a["mount_options"], a["devices"][0], fs], done)
    for d in a["job_dirs"]:
        owned_dir(os.path.join(fs, d), int(a["owner_uid"]), int(a["owner_gid"]), 0o700, done)


def attach(a: dict, done: list[str]) -> None:
    """Order matters: swap off and unmount before removing; directories before binds."""
    swaps = active_swaps()
    for path in a["unswaps"]:
        if path in swaps:
            run(["swapoff", path], done)
        if os.path.exists(path):
            os.unlink(path)
    mounted = mount_points()
    for u in a["unbinds"]:
        if u["target"] in mounted:
            run(["umount", u["target"]], done)
        prune(u["target"], u["root"])
    for d in a["dirs"]:
        owned_dir(d["path"], int(d["owner"]), int(d["group"]), int(d["mode"], 8), done)
    for b in a["binds"]:
        if b["target"] not in mounted:
            os.makedirs(b["target"], mode=0o755, exist_ok=True)
            run(["mount", "--bind", b["source"], b["target"]], done)
    for s in a["swaps"]:
        if s["path"] in swaps:
            continue
        os.makedirs(os.path.dirname(s["path"]), mode=0o700, exist_ok=True)
        if os.path.exists(s["path"]):  # a run cut short: start the file afresh
            os.unlink(s["path"])
        fd = os.open(s["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, int(s["size"]))
        except OSError as e:
            os.unlink(s["path"])
            raise Failed(f"swap file {s['path']}: {e.strerror}") from None
        finally:
            os.close(fd)
        run(["mkswap", "-q", s["path"]], done)
        run(["swapon", s["path"]], done)


def delete(a: dict, done: list[str]) -> None:
    attach(a["attach"], done)
    fs = a["fs_path"]
    if fs in mount_points():
        run(["umount", fs], done)
    run(["wipefs", "-a", "-q", *a["devices"]], done)
    if os.path.isdir(fs):
        os.rmdir(fs)


def main() -> None:
    with open(sys.argv[1]) as f:
        args = json.load(f)
    done: list[str] = []
    try:
        action = {"create": create, "attach": attach, "delete": delete}[args.pop("action")]
        action(args["attach"] if action is attach else args, done)
    except Failed as e:
        print(json.dumps({"failed": True, "msg": e.msg, "rc": e.rc, "stderr": e.stderr,
                          "changed": bool(done)}))
        sys.exit(1)
    except OSError as e:
        print(json.dumps({"failed": True, "msg": f"{e.filename}: {e.strerror}", "rc": 1,
                          "changed": bool(done)}))
        sys.exit(1)
    print(json.dumps({"changed": bool(done), "actions": done}))


if __name__ == "__main__":
    main()
