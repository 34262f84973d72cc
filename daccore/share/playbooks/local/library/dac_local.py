#!/usr/bin/python
# WANT_JSON
"""The local backend's work on a storage server, one task per lifecycle step.

A plain "WANT_JSON" module (arguments in a JSON file, result as JSON on stdout) using only the
standard library: Ansible runs it without building an AnsiballZ payload or importing its
module_utils, which costs 0.6 s per task on a 2-core machine (docs/performance.md). Every action
checks before it acts, so a run cut short by a killed dacd is simply run again. Commands run
from argv lists, never through a shell.

Root never resolves a path by name inside a tree the job's user can write (docs/security.md):
every directory of a buffer is reached from a root-owned anchor (the buffer's mount point, a
node's root) one component at a time with O_NOFOLLOW, made with mkdir relative to its parent's
fd, chowned and chmodded through its own fd, and bind-mounted from /proc/self/fd/N; a link where
a directory is expected fails the step with one line naming the path.

    action: create   mkfs (unless mounted), mount nodev,nosuid, the job's directories
    action: attach   compute-node bind mounts and swap files, to match the spec
    action: delete   attach (to nothing), unmount (killing what holds the buffer if busy),
                     zero the bricks, remove the mount point
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MS_BIND, _UMOUNT_NOFOLLOW = 4096, 8
_libc = ctypes.CDLL(None, use_errno=True)


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


def _parts(anchor: str, path: str) -> list[str]:
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(anchor))
    parts = [p for p in rel.split(os.sep) if p not in ("", ".")]
    if ".." in parts:
        raise Failed(f"{path}: not beneath {anchor}")
    return parts


def walk(anchor: str, path: str, done: list[str], make: int | None = None) -> int:
    """An fd of the directory `path`, reached from the root-owned `anchor` without following a
    link; missing directories are made (mode `make`, root's) when `make` is given."""
    fd = os.open(anchor, _DIR)  # the anchor is the admin's (fs_root, node roots)
    seen = anchor
    try:
        for part in _parts(anchor, path):
            seen = os.path.join(seen, part)
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if make is None:
                    raise
                os.mkdir(part, make, dir_fd=fd)  # never follows a link at `part` (EEXIST)
                done.append(f"mkdir {seen}")
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Failed(f"{seen}: a link or a file where a directory belongs; "
                                 "not followed (the job's user made it)") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def owned_dir(anchor: str, path: str, owner: int, group: int, mode: int,
              done: list[str]) -> None:
    fd = walk(anchor, path, done, make=mode)
    try:
        os.fchown(fd, owner, group)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _fd_path(fd: int, name: str = "") -> bytes:
    return f"/proc/self/fd/{fd}{'/' + name if name else ''}".encode()


def bind(anchor_src: str, source: str, anchor_dst: str, target: str, done: list[str]) -> None:
    """mount(2) from and onto the fds of checked directories: no name is resolved twice."""
    src = walk(anchor_src, source, done)
    try:
        # a node's root (the admin's path) and the job's directories in it: passable, never
        # listable, so no job learns the buffers of the others on its node
        os.makedirs(anchor_dst, mode=0o711, exist_ok=True)
        dst = walk(anchor_dst, target, done, make=0o711)
        try:
            if _libc.mount(_fd_path(src), _fd_path(dst), None, _MS_BIND, None) != 0:
                e = ctypes.get_errno()
                raise Failed(f"mount --bind {source} {target}: {os.strerror(e)}")
        finally:
            os.close(dst)
    finally:
        os.close(src)
    done.append(f"mount --bind {source} {target}")


def unmount(anchor: str, target: str, done: list[str], free: str | None = None) -> None:
    """umount2 of the last component, by name relative to its checked parent, not followed
    (an fd inside the mount would itself keep it busy). When the mount is busy and `free`
    names the buffer's mount point, what holds the buffer is killed and the umount retried:
    scanning /proc costs ~0.15 s on a loaded server, so only when needed."""
    parent = walk(anchor, os.path.dirname(os.path.normpath(target)), done)
    try:
        path = _fd_path(parent, os.path.basename(os.path.normpath(target)))
        for attempt in range(2):
            if _libc.umount2(path, _UMOUNT_NOFOLLOW) == 0:
                break
            e = ctypes.get_errno()
            if e != errno.EBUSY or free is None or attempt:
                raise Failed(f"umount {target}: {os.strerror(e)}")
            kill_holders(free, done)
    finally:
        os.close(parent)
    done.append(f"umount {target}")


def prune(path: str, root: str, done: list[str]) -> None:
    """Remove `path` and its empty parents, stopping at `root`; rmdir never follows a link."""
    parts = _parts(root, path)
    while parts:
        try:
            parent = walk(root, os.path.join(root, *parts[:-1]), done)
        except (FileNotFoundError, Failed):
            return
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError:  # not empty (another job's mounts), a mount point, or not a directory
            return
        finally:
            os.close(parent)
        parts.pop()


def kill_holders(fs: str, done: list[str]) -> None:
    """SIGKILL every process that uses the filesystem mounted at `fs` (its cwd, root, an open
    file or a mapping), in any mount namespace, so the umount cannot fail busy. Matched by
    st_dev, never by name; nothing happens unless `fs` is really a mount point, so a process on
    the parent filesystem is never touched."""
    fd = os.open(fs, _DIR)
    try:
        dev = os.fstat(fd).st_dev
        parent_dev = os.stat(os.path.dirname(os.path.normpath(fs))).st_dev
    finally:
        os.close(fd)
    if dev == parent_dev:
        return
    maps_dev = f"{os.major(dev):02x}:{os.minor(dev):02x}"
    spared = _ancestors()  # this module, Ansible, dacd (which may be reading the buffer)
    for _ in range(10):  # a killed process's children may have been forked meanwhile
        victims = [pid for pid in _pids() if pid not in spared and _holds(pid, dev, maps_dev)]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                done.append(f"kill -9 {pid}")
            except ProcessLookupError:
                pass
        for pid in victims:  # the mount is busy until the killed process is really gone
            deadline = time.monotonic() + 2
            while os.path.exists(f"/proc/{pid}") and not _zombie(pid) \
                    and time.monotonic() < deadline:
                time.sleep(0.005)
    raise Failed(f"processes keep appearing on {fs}; teardown retries")


def _ancestors() -> set[int]:
    pids, pid = {1}, os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _holds(pid: int, dev: int, maps_dev: str) -> bool:
    base = f"/proc/{pid}"
    try:
        links = ["cwd", "root"] + [f"fd/{n}" for n in os.listdir(f"{base}/fd")]
    except OSError:  # gone, or a kernel thread
        return False
    for link in links:
        try:
            # stat follows the kernel's magic link to the object itself: no name is resolved
            if os.stat(f"{base}/{link}").st_dev == dev:
                return True
        except OSError:
            pass
    try:
        with open(f"{base}/maps") as f:
            return any(line.split()[3] == maps_dev and line.split()[4] != "0" for line in f)
    except (OSError, IndexError):
        return False


def zero(devices: list[str], done: list[str]) -> None:
    """No byte of the last buffer stays readable on the brick, signatures included:
    BLKZEROOUT (NVMe write-zeroes or deallocate; on a loop device a zeroed range of the backing
    file), else zeroes written. Retried briefly while udev still probes the device after the
    umount (blkdiscard opens it exclusively)."""
    for dev in devices:
        deadline = time.monotonic() + 5
        while True:
            r = subprocess.run(["blkdiscard", "--zeroout", dev], capture_output=True, text=True)
            if r.returncode == 0 or "busy" not in r.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if r.returncode == 0:
            done.append(f"blkdiscard --zeroout {dev}")
        else:
            _write_zeroes(dev)
            done.append(f"zeroed {dev}")
        # BLKZEROOUT drops the device's page cache before it writes: a read meanwhile (any
        # blkid or lsblk scanning every device) caches the old blocks again, and they stay
        # readable through the device after the zeroes land (seen: a wiped brick still probed
        # as btrfs). Dropped again once the zeroes are there.
        fd = os.open(dev, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, _BLKFLSBUF)
        finally:
            os.close(fd)


_BLKFLSBUF = 0x1261  # _IO(0x12, 97): write back and drop the device's page cache


def _write_zeroes(dev: str) -> None:
    fd = os.open(dev, os.O_WRONLY | os.O_CLOEXEC)
    try:
        left, chunk = os.lseek(fd, 0, os.SEEK_END), bytes(4 << 20)
        os.lseek(fd, 0, os.SEEK_SET)
        while left:
            left -= os.write(fd, chunk[:min(left, len(chunk))])
        os.fsync(fd)
    finally:
        os.close(fd)


def create(a: dict, done: list[str]) -> None:
    fs = a["fs_path"]
    if fs not in mount_points():
        run(a["mkfs_argv"], done)
        os.makedirs(fs, mode=0o755, exist_ok=True)
        run(["mount", "-o", a["mount_options"], a["devices"][0], fs], done)
    # the filesystem's top, root's: passable (the copier reaches striped/ as the job's user),
    # never listable
    owned_dir(fs, fs, 0, 0, 0o711, done)
    for d in a["job_dirs"]:
        owned_dir(fs, os.path.join(fs, d), int(a["owner_uid"]), int(a["owner_gid"]), 0o700,
                  done)


def attach(a: dict, done: list[str]) -> None:
    """Order matters: swap off and unmount before removing; directories before binds."""
    fs = a["fs_path"]
    swaps = active_swaps()
    for path in a["unswaps"]:
        if path in swaps:
            run(["swapoff", path], done)
        _unlink(fs, path, done)
    mounted = mount_points()
    # attached nowhere after this step: whatever still uses the buffer is a job's leftover
    free = fs if not a["binds"] and fs in mounted else None
    for u in a["unbinds"]:
        if u["target"] in mounted:
            unmount(u["root"], u["target"], done, free)
        prune(u["target"], u["root"], done)
    for d in a["dirs"]:
        owned_dir(fs, d["path"], int(d["owner"]), int(d["group"]), int(d["mode"], 8), done)
    for b in a["binds"]:
        if b["target"] not in mounted:
            bind(fs, b["source"], b["root"], b["target"], done)
    for s in a["swaps"]:
        if s["path"] in swaps:
            continue
        # swap/ is root's, mode 0700, in the root-owned top of the buffer: no user writes here
        parent = walk(fs, os.path.dirname(s["path"]), done, make=0o700)
        name = os.path.basename(s["path"])
        try:
            try:  # a run cut short: start the file afresh
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=parent)
        finally:
            os.close(parent)
        try:
            os.posix_fallocate(fd, 0, int(s["size"]))
        except OSError as e:
            _unlink(fs, s["path"], done)
            raise Failed(f"swap file {s['path']}: {e.strerror}") from None
        finally:
            os.close(fd)
        run(["mkswap", "-q", s["path"]], done)
        run(["swapon", s["path"]], done)


def _unlink(anchor: str, path: str, done: list[str]) -> None:
    try:
        parent = walk(anchor, os.path.dirname(path), done)
    except FileNotFoundError:
        return
    try:
        os.unlink(os.path.basename(path), dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def delete(a: dict, done: list[str]) -> None:
    fs = a["fs_path"]
    attach(a["attach"], done)  # kills what holds a node's mount (a bind mount shares st_dev)
    if fs in mount_points():
        unmount(os.path.dirname(os.path.normpath(fs)), fs, done, free=fs)
    zero(a["devices"], done)  # signatures too: no wipefs needed
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
