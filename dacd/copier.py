"""The copier: stage data into or out of a buffer as the job's user.

dacd starts `python3 -I dacd/copier.py` (standard library only) with the user's uid, gid and
supplementary groups already taken (subprocess does setgroups/setgid/setuid before exec), so
not one path is opened as root and the kernel enforces the user's permissions. The plan comes
as JSON on stdin:

    {"pairs": [{"type": "file|directory|list", "source": "/abs", "destination": "/abs"}],
     "inside": "/the/buffer/root", "buffer_side": "destination|source", "workers": 4,
     "chunk": 268435456}

Stdout carries JSON lines: progress (bytes and files done and in total) at most once a second,
then {"done": true} or {"error": "<one line naming the path>"}; the exit status is 0 only when
everything was copied.

How: the tree is walked first (lstat, never following a link); directories are made, symlinks
are recreated as symlinks, then files are copied by a pool of forked workers with
copy_file_range (pread/pwrite across filesystems), skipping holes (SEEK_DATA/SEEK_HOLE) so
sparse files stay sparse; big files are split into chunks so one huge file uses every worker;
small files travel in batches so thousands of them cost little. Modes and times are set last,
directories deepest first.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from multiprocessing import get_context

CHUNK = 256 << 20  # a big file is split into pieces of this size
BATCH_BYTES = 32 << 20  # small files travel to a worker in batches up to this size...
BATCH_FILES = 256  # ...or this many files


class CopyError(Exception):
    """One line for the user, naming the path."""


def _fail(path: str, e: OSError) -> CopyError:
    return CopyError(f"{path}: {e.strerror or e}")


# -- planning -------------------------------------------------------------------------------------

class Plan:
    __slots__ = ("dirs", "parents", "links", "files", "bytes")

    def __init__(self) -> None:
        self.parents: set[str] = set()  # of single files and links: made if missing
        self.dirs: list[tuple[str, str, os.stat_result]] = []
        self.links: list[tuple[str, str]] = []
        self.files: list[tuple[str, str, os.stat_result]] = []
        self.bytes = 0


def _inside(path: str, root: str) -> bool:
    """`path` resolves inside `root`: its deepest existing ancestor's real path does."""
    probe = path
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    real = os.path.join(os.path.realpath(probe), os.path.relpath(path, probe))
    return os.path.normpath(real) == root or os.path.normpath(real).startswith(root + os.sep)


def plan(pairs: list[dict], inside: str, buffer_side: str) -> Plan:
    p = Plan()
    root = os.path.realpath(inside)
    todo = list(pairs)
    while todo:
        pair = todo.pop(0)
        src, dst = pair["source"], pair["destination"]
        for path in (src, dst):
            if ".." in path.split("/") or not path.startswith("/"):
                raise CopyError(f"{path}: must be an absolute path without '..'")
        if not _inside(pair[buffer_side], root):
            raise CopyError(f"{pair[buffer_side]}: resolves outside the buffer")
        try:
            st = os.lstat(src)
        except OSError as e:
            raise _fail(src, e) from None
        kind = pair["type"]
        if kind == "list":
            todo[:0] = _read_list(src, pair)
        elif kind == "directory":
            if not stat.S_ISDIR(st.st_mode):
                raise CopyError(f"{src}: not a directory")
            _walk(src, dst, st, p)
        elif stat.S_ISREG(st.st_mode):
            p.files.append((src, dst, st))
            p.bytes += st.st_size
            p.parents.add(os.path.dirname(dst))
        elif stat.S_ISLNK(st.st_mode):
            p.links.append((src, dst))
            p.parents.add(os.path.dirname(dst))
        else:
            raise CopyError(f"{src}: not a regular file")
    return p


def _read_list(path: str, pair: dict) -> list[dict]:
    """A type=list file: `source destination` per line (absolute sources; a relative
    destination is taken under the pair's destination), blank lines and #comments skipped.
    Each entry is a file or a directory, as its source is."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise _fail(path, e) from None
    out = []
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 2:
            raise CopyError(f"{path} line {number}: expected 'source destination'")
        src, dst = words
        try:
            kind = "directory" if stat.S_ISDIR(os.lstat(src).st_mode) else "file"
        except OSError as e:
            raise _fail(src, e) from None
        out.append({"type": kind, "source": src,
                    "destination": os.path.join(pair["destination"], dst)})
    return out


def _walk(src: str, dst: str, st: os.stat_result, p: Plan) -> None:
    p.dirs.append((src, dst, st))
    try:
        entries = list(os.scandir(src))
    except OSError as e:
        raise _fail(src, e) from None
    for entry in entries:
        s, d = entry.path, os.path.join(dst, entry.name)
        try:
            est = entry.stat(follow_symlinks=False)
        except OSError as e:
            raise _fail(s, e) from None
        if entry.is_dir(follow_symlinks=False):
            _walk(s, d, est, p)
        elif entry.is_symlink():
            p.links.append((s, d))
        elif stat.S_ISREG(est.st_mode):
            p.files.append((s, d, est))
            p.bytes += est.st_size
        # sockets, fifos and devices are not data: skipped


# -- copying --------------------------------------------------------------------------------------

_KERNEL_COPY = [True]  # copy_file_range, until the kernel refuses it across filesystems
#: one per worker process (each forks with its own copy), reused for every read
_BUFFER = memoryview(bytearray(1 << 20))


def _move(src_fd: int, dst_fd: int, count: int, off: int) -> int:
    """Copy up to `count` bytes at `off`: copy_file_range within one filesystem (inside the
    kernel, reflinks where it can); across two (EXDEV since Linux 5.19) read and write through a
    reused 1 MiB buffer: measured here as fast as `cp`, sendfile 10-20 % slower, a fresh 128 KiB
    bytes object per read 3 % slower (docs/performance.md)."""
    if _KERNEL_COPY[0]:
        try:
            return os.copy_file_range(src_fd, dst_fd, count, off, off)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            _KERNEL_COPY[0] = False
    n = os.preadv(src_fd, [_BUFFER[:min(count, len(_BUFFER))]], off)
    written = 0
    while written < n:
        written += os.pwrite(dst_fd, _BUFFER[written:n], off + written)
    return n


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    """Copy [start, end), skipping holes (the destination already has the final size)."""
    pos = start
    while pos < end:
        try:
            data = os.lseek(src_fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        if data >= end:
            break
        try:
            hole = min(os.lseek(src_fd, data, os.SEEK_HOLE), end)
        except OSError:
            hole = end
        _copy_dense(src_fd, dst_fd, data, hole)
        pos = hole


def _copy_task(task: tuple) -> tuple[int, int]:
    """A batch of whole files, or one chunk of a big one. Returns (bytes, whole files done).
    A dense whole file costs six system calls here: open, open (created with its mode), copy,
    utime, close, close; 10,000 small files are bound by exactly that."""
    kind, items = task
    copied = files = 0
    for src, dst, size, mode, atime, mtime, sparse, start, end in items:
        try:
            sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise _fail(src, e) from None
        try:
            dfd = _open_dst(dst, mode, whole=kind == "files")
            try:
                if kind == "files" and sparse:
                    os.ftruncate(dfd, size)  # holes stay holes
                if sparse:
                    _copy_range(sfd, dfd, start, end)
                else:
                    _copy_dense(sfd, dfd, start, end)
                copied += end - start  # holes count as done: they are the file's bytes too
                if kind == "files":
                    os.utime(dfd, ns=(atime, mtime))
                    files += 1
            except OSError as e:
                raise _fail(dst, e) from None
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
    return copied, files


def _open_dst(dst: str, mode: int, whole: bool) -> int:
    """A whole file is created with its final mode (umask is 0 here); one that already exists
    (a stage run again) is truncated and given the mode. A chunk opens the file `copy` made."""
    try:
        if not whole:
            return os.open(dst, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            fd = os.open(dst, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
            os.fchmod(fd, mode)
            return fd
    except OSError as e:
        raise _fail(dst, e) from None


def _copy_dense(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    off = start
    while off < end:
        n = _move(src_fd, dst_fd, end - off, off)
        if n == 0:
            raise OSError(errno.EIO, "the source shrank while being copied")
        off += n


def _tasks(p: Plan, chunk: int = CHUNK):
    batch: list[tuple] = []
    batch_bytes = 0
    for src, dst, st in p.files:
        item = (src, dst, st.st_size, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns,
                st.st_blocks * 512 < st.st_size)
        if st.st_size > chunk:
            for start in range(0, st.st_size, chunk):
                yield "chunk", [item + (start, min(start + chunk, st.st_size))]
            continue
        batch.append(item + (0, st.st_size))
        batch_bytes += st.st_size
        if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
            yield "files", batch
            batch, batch_bytes = [], 0
    if batch:
        yield "files", batch


def _makedirs(path: str) -> None:
    """Every missing directory made 0700 (os.makedirs would make the intermediate ones 0777
    under the copier's umask 0). Copied directories get their source's mode at the end;
    parents the user only named keep 0700."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def copy(p: Plan, workers: int, report, chunk: int = CHUNK) -> None:
    for dst in sorted(p.parents) + [d for _, d, _ in p.dirs]:
        try:
            _makedirs(dst)
        except OSError as e:
            raise _fail(dst, e) from None
    for src, dst in p.links:
        try:
            target = os.readlink(src)
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(target, dst)
        except OSError as e:
            raise _fail(dst, e) from None
    big = [(src, dst, st) for src, dst, st in p.files if st.st_size > chunk]
    for src, dst, st in big:  # chunks write into a file of the final size
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            os.ftruncate(fd, st.st_size)
            os.close(fd)
        except OSError as e:
            raise _fail(dst, e) from None
    done_bytes = done_files = 0
    total_files = len(p.files) + len(p.links)
    with get_context("fork").Pool(max(1, workers)) as pool:
        for copied, files in pool.imap_unordered(_copy_task, _tasks(p, chunk)):
            done_bytes += copied
            done_files += files
            report(done_bytes, done_files)
    for src, dst, st in big:
        try:
            os.chmod(dst, stat.S_IMODE(st.st_mode))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as e:
            raise _fail(dst, e) from None
    for _, dst, st in reversed(p.dirs):  # deepest first: setting a time is a change above
        try:
            os.chmod(dst, stat.S_IMODE(st.st_mode))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError as e:
            raise _fail(dst, e) from None
    report(done_bytes, total_files, final=True)


def main() -> int:
    def emit(**fields) -> None:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()
    os.umask(0)  # files are created with their source's mode; directories get theirs at the end
    try:
        request = json.load(sys.stdin)
        p = plan(request["pairs"], request["inside"], request["buffer_side"])
        total_files = len(p.files) + len(p.links)
        last = [0.0]

        def report(done_bytes: int, done_files: int, final: bool = False) -> None:
            now = time.monotonic()
            if final or now - last[0] >= 1.0:
                last[0] = now
                emit(bytes_done=done_bytes, bytes_total=p.bytes, files_done=done_files,
                     files_total=total_files)
        report(0, 0)
        copy(p, int(request.get("workers", 4)), report, int(request.get("chunk", CHUNK)))
    except CopyError as e:
        emit(error=str(e))
        return 1
    except Exception as e:  # noqa: BLE001 - one line, never a traceback, for Slurm's Reason
        emit(error=f"copier failed: {type(e).__name__}: {e}")
        return 1
    emit(done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
