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
                     prove no mount of it is left anywhere (each brick opened O_EXCL), zero
                     the bricks through those descriptors, remove the mount point

What a job left behind never outlives teardown (docs/security.md, "Teardown always ends"): when
an unmount is busy, or a brick is still held after the host's last unmount, the owner's
processes on this server that hold the buffer are killed (`Holders`), and a mount still busy is
detached lazily; the bricks are zeroed only once each opens exclusively (`claim`). What still
holds them is named in one line, and nothing is zeroed; the delete runs again later.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import time
from typing import Any

#: a task's arguments, as json.load read them from Ansible's file (dacd's playbook sets them)
Args = dict[str, Any]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MS_BIND, _MNT_DETACH, _UMOUNT_NOFOLLOW = 4096, 2, 8
_CLONE_NEWNS, _NS_GET_USERNS = 0x20000, 0xB701  # linux/sched.h, linux/nsfs.h
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


def walk(
    anchor: str, path: str, done: list[str], make: int | None = None, reach: int | None = None
) -> int:
    """An fd of the directory `path`, reached from the root-owned `anchor` without following a
    link; missing directories are made (mode `make`, root's) when `make` is given. With
    `reach`, every directory below the anchor is closed to all but root and that uid, who may
    only pass through it (`passable_to`)."""
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
                    raise Failed(
                        f"{seen}: a link or a file where a directory belongs; "
                        "not followed (the job's user made it)"
                    ) from None
                raise
            os.close(fd)
            fd = child
            if reach is not None:
                passable_to(fd, reach, seen, done)
    except BaseException:
        os.close(fd)
        raise
    return fd


_ACL_XATTR = "system.posix_acl_access"
# linux/posix_acl_xattr.h: a version, then (tag, perm, id) entries sorted by tag, then id
_ACL_VERSION, _ACL_ENTRY = struct.Struct("=I"), struct.Struct("=HHI")
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER, _NO_ID = 0x01, 0x02, 0x04, 0x10, 0x20, 0xFFFFFFFF


def passable_to(fd: int, uid: int, path: str, done: list[str]) -> None:
    """Close root's directory `fd` to everyone but root and `uid` (and any user an earlier
    call let through: a job's directory on a node holds only its owner's buffers), who may pass
    through it but not list it: mode 0700 and an access ACL `user:<uid>:--x` (mask `--x`).
    Without it another user could hold a descriptor on a buffer's mount from outside the job
    (an O_PATH open needs no permission on its target, only on the directories above it),
    read its usage with statvfs, and keep its unmount busy for good (issue 45). An ACL and
    not the user's ownership: the directory stays root's, so the user cannot chmod it or
    write into it, and root's later walks here resolve nothing the user made."""
    st = os.fstat(fd)
    if st.st_uid != 0:
        raise Failed(f"{path}: not root's (uid {st.st_uid}); an admin must remove it")
    try:
        raw = os.getxattr(fd, _ACL_XATTR)
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
        raw = b""
    users = {uid}
    if len(raw) > _ACL_VERSION.size:
        users |= {
            i for tag, _, i in _ACL_ENTRY.iter_unpack(raw[_ACL_VERSION.size :]) if tag == _USER
        }
    entries = [(_USER_OBJ, 7, _NO_ID)] + [(_USER, 1, u) for u in sorted(users)]
    entries += [(_GROUP_OBJ, 0, _NO_ID), (_MASK, 1, _NO_ID), (_OTHER, 0, _NO_ID)]
    acl = _ACL_VERSION.pack(2) + b"".join(_ACL_ENTRY.pack(*e) for e in entries)
    if acl == raw and st.st_mode & 0o7777 == 0o710:  # the ACL's mask shows as group bits
        return
    try:
        os.fchmod(fd, 0o700)  # closed first: never open to others while the ACL is written
        os.setxattr(fd, _ACL_XATTR, acl)
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise
        raise Failed(
            f"{path}: its filesystem keeps no POSIX ACLs, so the buffer's directory cannot be "
            "closed to other users; an admin must mount it with ACLs (acl)"
        ) from None
    done.append(f"setfacl -m u:{uid}:x {path}")


def owned_dir(anchor: str, path: str, owner: int, group: int, mode: int, done: list[str]) -> None:
    fd = walk(anchor, path, done, make=mode)
    try:
        os.fchown(fd, owner, group)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _fd_path(fd: int, name: str = "") -> bytes:
    return f"/proc/self/fd/{fd}{'/' + name if name else ''}".encode()


def bind(
    anchor_src: str, source: str, anchor_dst: str, target: str, owner: int, done: list[str]
) -> None:
    """mount(2) from and onto the fds of checked directories: no name is resolved twice."""
    src = walk(anchor_src, source, done)
    try:
        # a node's root (the admin's path): passable, never listable, so no job learns the
        # buffers of the others on its node; the job's directories in it: passable by the
        # buffer's owner alone (`passable_to`)
        os.makedirs(anchor_dst, mode=0o711, exist_ok=True)
        dst = walk(anchor_dst, target, done, make=0o700, reach=owner)
        try:
            if _libc.mount(_fd_path(src), _fd_path(dst), None, _MS_BIND, None) != 0:
                e = ctypes.get_errno()
                raise Failed(f"mount --bind {source} {target}: {os.strerror(e)}")
        finally:
            os.close(dst)
    finally:
        os.close(src)
    done.append(f"mount --bind {source} {target}")


def unmount(anchor: str, target: str, done: list[str], holders: Holders | None = None) -> None:
    """umount2 of the last component, by name relative to its checked parent, not followed
    (an fd inside the mount would itself keep it busy). When the mount is busy and `holders`
    is given (the buffer is attached nowhere else after this), the owner's processes that hold
    the buffer are killed and the umount retried (scanning /proc costs ~0.15 s on a loaded
    server, so only when needed); still busy, the mount is detached lazily: it leaves the
    tree at once, so nothing enters the buffer by a path again, and what still holds it keeps
    only the filesystem, which the bricks' exclusive open (`claim`) then proves gone before
    anything is zeroed. No process is ever stopped (issue 45)."""
    parent = walk(anchor, os.path.dirname(os.path.normpath(target)), done)
    try:
        path = _fd_path(parent, os.path.basename(os.path.normpath(target)))
        for attempt in range(2):
            if _libc.umount2(path, _UMOUNT_NOFOLLOW) == 0:
                done.append(f"umount {target}")
                return
            e = ctypes.get_errno()
            if e != errno.EBUSY or holders is None:
                raise Failed(f"umount {target}: {os.strerror(e)}")
            if attempt == 0:
                holders.kill(done=done)
        if _libc.umount2(path, _UMOUNT_NOFOLLOW | _MNT_DETACH) != 0:
            raise Failed(f"umount -l {target}: {os.strerror(ctypes.get_errno())}")
        done.append(f"umount -l {target}")
        assert holders is not None  # a busy unmount without them raised above
        holders.kill(done=done)  # what entered before the detach, if it was the owner's
    finally:
        os.close(parent)


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


class Holders:
    """What keeps a buffer's filesystem alive, killed only when an unmount is busy or a brick
    is still held (`kill`): the cost of scanning /proc is paid only then. Only the owner's
    processes are killed, and only those that hold the buffer: a leftover process or a tree of
    them goes without touching anything else of the user's, and nothing is ever stopped (a
    spawner that keeps sending new children into the buffer by its path reaches nothing once
    the mount is detached: `unmount`). Another user's or root's holder is named (`left`),
    never killed. Matched by st_dev and by mount namespace, never by name."""

    def __init__(self, owner: int, devices: list[str], fs: str | None = None):
        self.owner, self.devices = owner, devices
        self.devs: set[int] = set()  # the filesystem's st_dev
        self.rdevs: set[int] = set()  # the bricks' (xfs's st_dev is its brick's)
        for dev in devices:
            try:
                self.rdevs.add(os.stat(dev).st_rdev)
            except OSError:
                pass
        if fs is not None:
            fd = os.open(fs, _DIR)
            try:
                if os.fstat(fd).st_dev != os.stat(os.path.dirname(os.path.normpath(fs))).st_dev:
                    self.devs.add(os.fstat(fd).st_dev)  # really a mount point
            finally:
                os.close(fd)
        # xfs's st_dev is its brick's: a retry finds what holds a detached one by it too
        self.devs |= self.rdevs
        self.spared = _ancestors()  # this module, Ansible, dacd (which may read the buffer)
        self.found: list[str] = []  # what holds it and was not killed, for `left`

    def kill(self, namespaces: bool = False, done: list[str] | None = None) -> None:
        """SIGKILL the owner's processes that use the filesystem (cwd, root, an open file, a
        mapping), in rounds (a killed one may have forked); with `namespaces` (the host has
        unmounted it: a mount left elsewhere is a copy no unmount of ours reaches), also every
        process of a mount namespace that holds it, when all of that namespace's processes are
        the owner's, and the owner's processes holding a mount namespace's descriptor."""
        for _ in range(10):
            victims = self._scan(namespaces, done)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                    if done is not None:
                        done.append(f"kill -9 {pid}")
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5  # gone before the unmount is retried
            for pid in victims:
                while (
                    os.path.exists(f"/proc/{pid}")
                    and not _zombie(pid)
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.005)
            if not victims:
                return

    def left(self) -> str:
        """What still holds the buffer, as far as /proc shows it, and who must act."""
        if not self.found:
            return (
                "a mount or user no process shows (a mount namespace kept by a file, or "
                "one whose processes are all chrooted away from it): an admin must find it "
                f"(lsns -t mnt; fuser -vm {' '.join(self.devices)}) and end it"
            )
        more = f" and {len(self.found) - 3} more" if len(self.found) > 3 else ""
        return (
            f"{'; '.join(self.found[:3])}{more}; not the job's user's alone, so not "
            "killed: an admin must end them"
        )

    def _scan(self, namespaces: bool, done: list[str] | None = None) -> list[int]:
        """The owner's processes to kill; what else holds the buffer goes to `found`. With
        `namespaces`, a copy of the buffer's mounts in a mount namespace of root's (a daemon
        started with a private mount namespace while the buffer was mounted) is unmounted
        there, as propagation would have done on a host whose / is shared."""
        self.found = []
        maps_devs = {f"{os.major(d):02x}:{os.minor(d):02x}" for d in self.devs}
        victims: list[int] = []
        by_ns: dict[str, list[tuple[int, bool, int]]] = {}
        mine = os.readlink("/proc/self/ns/mnt")
        for pid in _pids():
            if pid in self.spared:
                continue
            state, uids = _status(pid)
            if state in "ZX" or not uids:
                continue
            owners = self.owner in uids and self.owner != 0 or self.owner == 0 and uids == {0}
            if namespaces:
                try:
                    ns = os.readlink(f"/proc/{pid}/ns/mnt")
                except OSError:
                    ns = mine
                if ns != mine:
                    by_ns.setdefault(ns, []).append((pid, owners, min(uids)))
            why = _holds(pid, self.devs, maps_devs, ns_fds=namespaces and owners)
            if why and owners:
                victims.append(pid)
            elif why:
                self.found.append(f"pid {pid} (uid {min(uids)}) uses it ({why})")
        for ns, procs in by_ns.items():
            pid = procs[0][0]
            where = self._mounted_in(pid)
            if not where:
                continue
            if all(owners for _, owners, _ in procs):  # the user's own namespace
                victims += [p for p, _, _ in procs if p not in victims]
                continue
            if _roots(pid):  # a daemon's, made while the buffer was mounted: an unlocked copy
                where = self._mounted_in(pid, unmount=True)
                if done is not None:
                    done += [f"umount {point} in {ns}" for point, why in where if not why]
            pids = ", ".join(str(p) for p, _, _ in procs[:3])
            users = ", ".join(sorted({str(u) for _, _, u in procs}))
            self.found += [
                f"mount namespace {ns} (pid {pids}; uid {users}) has it mounted at "
                f"{point}{f' ({why})' if why != 'mounted' else ''}"
                for point, why in where
                if why
            ]
        return victims

    def _mounted_in(self, pid: int, unmount: bool = False) -> list[tuple[str, str]]:
        """The mounts of the filesystem in `pid`'s mount namespace, as (mount point, "mounted"),
        read from inside it (a chrooted process's own mountinfo hides what is outside its
        root); with `unmount`, each unmounted there (the deepest first, never lazily, the last
        component not followed): (mount point, "" or why it stays)."""
        ids = {f"{os.major(d)}:{os.minor(d)}" for d in self.devs | self.rdevs}
        try:
            ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []
        proc = os.open("/proc", _DIR)
        r, w = os.pipe()
        child = os.fork()
        if child == 0:  # setns needs a single thread, and this process stays where it is
            try:
                os.close(r)
                if _libc.setns(ns, _CLONE_NEWNS) != 0:
                    os._exit(1)
                fd = os.open("thread-self/mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
                with os.fdopen(fd) as f:
                    lines = f.read().splitlines()
                out = []
                for line in lines:
                    fields = line.split()
                    tail = fields[fields.index("-") + 1 :] if "-" in fields else []
                    if fields[2] in ids or len(tail) > 1 and _unescape(tail[1]) in self.devices:
                        out.append((_unescape(fields[4]), fields[2], "mounted"))
                if unmount:
                    out.sort(key=lambda m: -len(m[0]))
                    for i, (point, mm, _) in enumerate(out):
                        why = (
                            ""
                            if _libc.umount2(point.encode(), _UMOUNT_NOFOLLOW) == 0
                            else os.strerror(ctypes.get_errno())
                        )
                        out[i] = (point, mm, why)
                os.write(w, json.dumps(out).encode())
            finally:
                os._exit(0)
        os.close(w)
        os.close(ns)
        os.close(proc)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(child, 0)
        try:
            found = json.loads(data) if data else []
        except ValueError:  # the child died half-way: what it saw counts as nothing
            found = []
        for _, mm, _ in found:
            major, minor = mm.split(":")
            self.devs.add(os.makedev(int(major), int(minor)))  # btrfs's is its own
        return [(point, why) for point, _, why in found]


def _roots(pid: int) -> bool:
    """Whether `pid`'s mount namespace belongs to the initial user namespace (root made it;
    no user can mount in it, and its mounts of the buffer are not locked)."""
    try:
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        owner = fcntl.ioctl(fd, _NS_GET_USERNS)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        return os.fstat(owner).st_ino == os.stat("/proc/self/ns/user").st_ino
    finally:
        os.close(owner)


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


def _status(pid: int) -> tuple[str, set[int]]:
    """State letter and real, effective, saved and filesystem uids (as this namespace sees
    them: a process in a user namespace shows its owner's uid; /proc/<pid>'s own owner would
    be root for one that made itself undumpable); ("X", set()) once gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
        state = text.split("\nState:", 1)[1].split()[0]
        uids = {int(u) for u in text.split("\nUid:", 1)[1].split("\n", 1)[0].split()}
        return state, uids
    except (OSError, IndexError, ValueError):
        return "X", set()


def _zombie(pid: int) -> bool:
    return _status(pid)[0] in "ZX"


def _holds(pid: int, devs: set[int], maps_devs: set[str], ns_fds: bool = False) -> str:
    """How the process uses the filesystem (cwd, root, fd N, a mapping, a mount namespace's
    descriptor when `ns_fds`), or ""."""
    base = f"/proc/{pid}"
    try:
        links = ["cwd", "root"] + [f"fd/{n}" for n in os.listdir(f"{base}/fd")]
    except OSError:  # gone, or a kernel thread
        return ""
    for link in links:
        try:
            # stat follows the kernel's magic link to the object itself: no name is resolved
            if devs and os.stat(f"{base}/{link}").st_dev in devs:
                return link
            if (
                ns_fds
                and link.startswith("fd/")
                and os.readlink(f"{base}/{link}").startswith("mnt:[")
            ):
                return f"{link}, a mount namespace"
        except OSError:
            pass
    if not maps_devs:
        return ""
    try:
        with open(f"{base}/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[3] in maps_devs and fields[4] != "0":
                    return "a mapping"
    except OSError:
        pass
    return ""


def claim(devices: list[str]) -> list[int]:
    """Each brick opened O_EXCL for writing: the kernel refuses it (EBUSY) while any
    filesystem holds the brick, in any mount namespace, a lazily detached mount included. The
    proof that no mount of the buffer is left, and it holds: nothing mounts a brick while this
    fd is open. Retried briefly: a namespace whose last process just died is let go
    asynchronously."""
    fds: list[int] = []
    try:
        for dev in devices:
            deadline = time.monotonic() + 1
            while True:
                try:
                    fds.append(os.open(dev, os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC))
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


_BLKZEROOUT = 0x127F  # _IO(0x12, 127), linux/fs.h
_BLKFLSBUF = 0x1261  # _IO(0x12, 97): write back and drop the device's page cache


def zero(devices: list[str], fds: list[int], done: list[str]) -> None:
    """No byte of the last buffer stays readable on the brick, signatures included:
    BLKZEROOUT (NVMe write-zeroes or deallocate; on a loop device a zeroed range of the backing
    file), else zeroes written; only through the exclusive descriptors `claim` opened."""
    for dev, fd in zip(devices, fds, strict=True):
        size = os.lseek(fd, 0, os.SEEK_END)
        try:
            fcntl.ioctl(fd, _BLKZEROOUT, struct.pack("=QQ", 0, size))
            done.append(f"BLKZEROOUT {dev}")
        except OSError:
            _write_zeroes(fd, size)
            done.append(f"zeroed {dev}")
        # BLKZEROOUT drops the device's page cache before it writes: a read meanwhile (any
        # blkid or lsblk scanning every device) caches the old blocks again, and they stay
        # readable through the device after the zeroes land (seen: a wiped brick still probed
        # as btrfs). Dropped again once the zeroes are there.
        fcntl.ioctl(fd, _BLKFLSBUF)


def _write_zeroes(fd: int, left: int) -> None:
    chunk = bytes(4 << 20)
    os.lseek(fd, 0, os.SEEK_SET)
    while left:
        left -= os.write(fd, chunk[: min(left, len(chunk))])
    os.fsync(fd)


def create(a: Args, done: list[str]) -> None:
    fs, buffer_dir = a["fs_path"], _buffer_dir(a)
    if buffer_dir:
        # <fs_root>/<buffer>/, the mount point's parent: passable by the owner alone, so no
        # other user opens the mount point itself (daccore.records.layout)
        fs_root = os.path.dirname(buffer_dir)
        os.makedirs(fs_root, mode=0o711, exist_ok=True)  # dacd made it at its start
        os.close(walk(fs_root, buffer_dir, done, make=0o700, reach=_uid(a)))
    if fs not in mount_points():
        run(a["mkfs_argv"], done)
        if buffer_dir:
            os.close(walk(buffer_dir, fs, done, make=0o700))  # hidden by the mount
        else:  # a dacd older than the closed parent, until it restarts: its layout
            os.makedirs(fs, mode=0o755, exist_ok=True)
        run(["mount", "-o", a["mount_options"], a["devices"][0], fs], done)
    # the filesystem's top, root's: passable (the copier reaches striped/ as the job's user),
    # never listable
    owned_dir(fs, fs, 0, 0, 0o711, done)
    for d in a["job_dirs"]:
        owned_dir(fs, os.path.join(fs, d), int(a["owner_uid"]), int(a["owner_gid"]), 0o700, done)


def attach(a: Args, done: list[str], holders: Holders | None = None) -> None:
    """Order matters: swap off and unmount before removing; directories before binds.
    `holders`: the caller's (delete's)."""
    fs = a["fs_path"]
    swaps = active_swaps()
    for path in a["unswaps"]:
        if path in swaps:
            run(["swapoff", path], done)
        _unlink(fs, path, done)
    mounted = mount_points()
    # attached nowhere after this step: whatever still uses the buffer is a job's leftover
    last = not a["binds"] and fs in mounted
    if last and holders is None:
        holders = Holders(int(a["owner_uid"]), [], fs)
    for u in a["unbinds"]:
        if u["target"] in mounted:
            unmount(u["root"], u["target"], done, holders if last else None)
        prune(u["target"], u["root"], done)
    for d in a["dirs"]:
        owned_dir(fs, d["path"], int(d["owner"]), int(d["group"]), int(d["mode"], 8), done)
    for b in a["binds"]:
        if b["target"] not in mounted:
            bind(fs, b["source"], b["root"], b["target"], int(a["owner_uid"]), done)
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
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=parent
            )
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


def delete(a: Args, done: list[str]) -> None:
    fs, devices, buffer_dir = a["fs_path"], a["devices"], _buffer_dir(a)
    points = mount_points()
    mounted = fs in points
    holders = Holders(_uid(a), devices, fs if mounted else None)
    # kills what holds a node's mount (a bind mount shares st_dev)
    attach({**a["attach"], "owner_uid": a["owner_uid"]}, done, holders)
    if mounted:
        unmount(os.path.dirname(os.path.normpath(fs)), fs, done, holders)
    if buffer_dir in points:  # mounted by a dac before the mount point moved to <buffer>/mnt
        unmount(os.path.dirname(buffer_dir), buffer_dir, done, holders)
    fds = _claimed(devices, holders, done)
    try:
        zero(devices, fds, done)  # signatures too: no wipefs needed
    finally:
        for fd in fds:
            os.close(fd)
    for d in (fs, buffer_dir) if buffer_dir else (fs,):
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(d)


def _uid(a: Args) -> int:
    return int(a["owner_uid"])


def _buffer_dir(a: Args) -> str:
    """The mount point's closed parent, `<fs_root>/<buffer>`; "" from a dacd that predates it
    (its playbook run passes none until it restarts), whose fs_path is the mount point in
    fs_root, as it was: never mistaken for the new layout, or fs_root would be closed."""
    d = a.get("buffer_dir") or ""
    if d and os.path.dirname(os.path.normpath(a["fs_path"])) != os.path.normpath(d):
        raise Failed(f"fs_path {a['fs_path']} is not in buffer_dir {d}")
    return d


def _claimed(devices: list[str], holders: Holders, done: list[str]) -> list[int]:
    """The bricks, claimed (`claim`) once the host has no mount of them left; a brick still
    held means a mount elsewhere (the user's own mount namespace, a lazily detached mount
    something still holds): its holders are killed, or named in one line, and nothing is
    zeroed or released."""
    for _ in range(3):  # each round waits a little too: a device probe may hold it briefly
        try:
            return claim(devices)
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
        holders.kill(namespaces=True, done=done)
    raise Failed(
        f"{', '.join(devices)}: the buffer's filesystem is still mounted after "
        f"its unmount: {holders.left()}; nothing was zeroed or released, and "
        "teardown retries"
    )


def main() -> None:
    with open(sys.argv[1]) as f:
        args = json.load(f)
    done: list[str] = []
    try:
        action = {"create": create, "attach": attach, "delete": delete}[args.pop("action")]
        action(
            {**args["attach"], "owner_uid": args["owner_uid"]} if action is attach else args, done
        )
    except Failed as e:
        _failed(e.msg, done, e.rc, e.stderr)
    except OSError as e:
        _failed(f"{e.filename}: {e.strerror}", done)
    except Exception as e:  # noqa: BLE001 - a bug: one line for Slurm, the traceback for admins
        import traceback

        _failed(f"internal error: {type(e).__name__}: {e}", done, stderr=traceback.format_exc())
    print(json.dumps({"changed": bool(done), "actions": done}))


def _failed(msg: str, done: list[str], rc: int = 1, stderr: str = "") -> None:
    """The module's answer to Ansible for a failed action (not a traceback, which Ansible
    would report as an unreadable result), then exit."""
    print(
        json.dumps({"failed": True, "msg": msg, "rc": rc, "stderr": stderr, "changed": bool(done)})
    )
    sys.exit(1)


if __name__ == "__main__":
    main()
