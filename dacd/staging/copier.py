"""The copier: stage data into or out of a buffer as the job's user.

dacd starts `python3 -I -S dacd/staging/copier.py` (standard library only, no site packages)
with the user's uid, gid and supplementary groups already taken (subprocess does setgroups/setgid/
setuid before exec), so not one path is opened as root and the kernel enforces the user's
permissions.
The plan comes on stdin as encode_plan writes it: the buffer's root, which side of each pair is
in the buffer, the number of workers, the chunk size, then each pair's type (file, directory or
list), source and destination.

Stdout carries JSON lines: progress (bytes and files done and in total, the rate in bytes per
second, the ETA in seconds, and `counting` while the tree is still being walked) four times a
second in the first 3 s, then at most once a second; then {"done": true} or
{"error": "<one line naming the path>"}; the exit status is 0 only
when everything was copied.

How: every pair is checked first (absolute, no '..', a buffer-side source resolving inside the
buffer, the source there, the data fitting in the destination's free space); then the tree is
walked (lstat, never following a link) while a pool of
forked workers already copies what the walk has found: directories are made as they are
reached, symlinks are recreated as symlinks, files travel to the workers in batches, big files
in chunks so one huge file uses every worker. A worker opens a batch's sources and asks the
kernel to read them all ahead (POSIX_FADV_WILLNEED) before copying the first, so a cold disk
serves many reads at once; data moves with copy_file_range (pread/pwrite across filesystems),
skipping holes (SEEK_DATA/SEEK_HOLE) so sparse files stay sparse. Modes and times are set last,
directories deepest first.

Destinations are never resolved by name (docs/security.md, rule 1): each pair's destination
hangs below an anchor opened at check time, before anything was copied (the buffer's root for
stage_in; for stage_out the real path of the deepest directory that already existed), and
every component below it is opened with O_PATH | O_NOFOLLOW relative to the one above (mkdirat
where missing). A link met there, one the job made or one an earlier pair just copied, fails
the stage naming it; an existing file is unlinked and made anew, never written through. Sources
are opened O_NONBLOCK | O_NOFOLLOW and checked with fstat, so a FIFO, device or socket, named
or swapped in after the walk, is refused at once instead of blocking a worker.

One file, though long, because it is one program: what runs as the user is this file alone,
opened by dacd and run from its descriptor with no import path (dacd/staging/run.py), so
nothing it needs may live in another file of dac's. A split stage's share copier
(dacd/staging/share.py) is the same program with three roles added: it loads this file from the
descriptor dacd passes beside its own and uses the public names below (those without a leading
underscore: the checks, destinations resolved beneath their anchors, the workers, `Copy`, the
protocol's lines) and `main`, the tail every copier process ends with.
"""

from __future__ import annotations

import errno
import marshal
import mmap
import os
import select
import signal
import stat
import struct
import sys
import time

TYPE_CHECKING = False  # typing's own without importing typing: the copier starts per stage
if TYPE_CHECKING:  # mypy: True; nothing here runs
    from collections.abc import Callable
    from typing import Any, Protocol, TypedDict

    class Pair(TypedDict):
        """A line of the plan: its type ("file", "directory" or "list"), source and
        destination."""

        type: str
        source: str
        destination: str

    #: a checked pair: (type, source, destination beneath its anchor, lstat of the source)
    Checked = tuple[str, str, str, os.stat_result]
    #: a whole file for a worker: (src, dst, size, mode, atime, mtime, sparse)
    FileItem = tuple[str, str, int, int, int, int, bool]
    #: [start, end) of a big file: a FileItem's fields, then start and end
    ChunkItem = tuple[str, str, int, int, int, int, bool, int, int]
    #: what the main process sends a worker: ("files", a batch) or ("chunk", one range)
    Task = tuple[str, list[FileItem]] | tuple[str, ChunkItem]
    #: a worker's answer: ("part", bytes, 0), ("ok", bytes, files) or ("error", line, 0)
    Result = tuple[str, int | str, int]
    #: a worker's results as they come: (bytes copied, files done)
    OnResult = Callable[[int, int], None]

    class Report(Protocol):
        """`reporter`'s: a progress line for `c`, always when `final`."""

        def __call__(self, c: Copy, final: bool = False) -> None: ...


CHUNK = 256 << 20  # a big file is split into pieces of this size
BATCH_BYTES = 32 << 20  # small files travel to a worker in batches up to this size...
BATCH_FILES = 64  # ...or this many files (all read ahead at once)
QUEUED = 2  # tasks in flight per worker: the next is there when one ends
PART = 64 << 20  # a chunk's worker reports its progress every this many bytes
WRITEBACK = 8 << 20  # a big copy is pushed to the disk in steps of this size...
#: ...and each step's destination pages are dropped this many steps later, their writeback done
#: (a 2 GiB copy then holds ~0.3 GiB of page cache instead of 2.1 GiB; docs/performance.md)
DROP_LAG = 4
#: the workers yield the CPU to the walk that feeds them (and to dacd beside them): with 4
#: workers on 2 cores the walk got 2/5 of a core and was what they waited for; 10,000 small
#: files 0.61 s at nice 0, 0.57 s at 3, 0.55 s at 10 (docs/performance.md). Not when the
#: plan names files only (no walk: an in-job drain of a checkpoint): there, beside 4 busy
#: processes on the 2 cores, nice 10 copied 512 MiB at 33-39 MiB/s, nice 0 at 119-205, cp 153-273
WORKER_NICE = 10
DIED = "copier failed: a copy worker died"  # killed: by the OOM killer, an admin
#: a type=list file: at most this many bytes and entries (a list of 200,000 pairs is ~100 MiB of
#: the copier's memory; dacd caps that at STAGE_MEMORY in dacd/staging/run.py)
LIST_BYTES = 16 << 20
LIST_ENTRIES = 200_000
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SOURCE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CopyError(Exception):
    """One line for the user, naming the path."""


def path_error(path: str, e: OSError) -> CopyError:
    """`e` met on `path`, as the user's one line."""
    return CopyError(f"{path}: {e.strerror or e}")


# -- checking the pairs ---------------------------------------------------------------------------


def _inside(path: str, root: str) -> bool:
    """`path` resolves inside `root`: its deepest existing ancestor's real path does."""
    probe = path
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    real = os.path.join(os.path.realpath(probe), os.path.relpath(path, probe))
    return os.path.normpath(real) == root or os.path.normpath(real).startswith(root + os.sep)


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _anchor(path: str) -> str:
    """An anchor for a destination: `path` opened (O_PATH) and kept in _ROOTS for the workers
    forked later; its real path, which every destination below it is written under."""
    for root, _ in _ROOTS:
        if root == path:
            return path
    try:
        fd = os.open(path, _DIR)
    except OSError as e:
        raise path_error(path, e) from None
    _ROOTS.append((path, fd))
    _ROOTS.sort(key=lambda r: -len(r[0]))  # the longest prefix wins in root_of
    return path


def _dst_anchor(dst: str, root: str, buffer_side: str) -> str:
    """stage_in: the destination beneath the buffer's root, by name only (nothing followed);
    stage_out: rewritten under the real path of its deepest existing parent, resolved now,
    before any pair has copied a link there."""
    if buffer_side == "destination":
        if not _below(dst, root):
            raise CopyError(f"{dst}: resolves outside the buffer")
        _anchor(root)
        return dst
    probe = os.path.dirname(dst)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    real = os.path.realpath(probe)
    _anchor(real)
    return os.path.join(real, os.path.relpath(dst, probe))


def check(pairs: list[Pair], inside: str, buffer_side: str) -> list[Checked]:
    """Every pair (lists expanded) as (type, source, destination, lstat of the source), each one
    checked before anything is copied; the destinations' anchors opened (_ROOTS)."""
    root = os.path.realpath(inside)
    todo: list[Pair] = pairs[::-1]  # a stack, in order: a list of 100,000 lines pops in O(1)
    out: list[Checked] = []
    while todo:
        pair = todo.pop()
        src, dst = pair["source"], pair["destination"]
        for path in (src, dst):
            if ".." in path.split("/") or not path.startswith("/"):
                raise CopyError(f"{path}: must be an absolute path without '..'")
        if buffer_side == "source" and not _inside(src, root):
            raise CopyError(f"{src}: resolves outside the buffer")
        try:
            st = os.lstat(src)
        except OSError as e:
            raise path_error(src, e) from None
        kind = pair["type"]
        if kind == "list":
            todo += _read_list(
                src,
                pair,
                root if buffer_side == "source" else os.path.normpath(inside),
                buffer_side,
            )[::-1]
            if len(todo) > LIST_ENTRIES:
                raise CopyError(f"{src}: more than {LIST_ENTRIES} entries to stage")
            continue
        if kind == "directory" and not stat.S_ISDIR(st.st_mode):
            raise CopyError(f"{src}: not a directory")
        if kind != "directory" and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise CopyError(
                f"{src}: not a regular file (FIFOs, devices and sockets are not staged)"
            )
        dst = os.path.normpath(dst)  # "$DW_JOB_STRIPED" alone ends in a slash
        out.append((kind, src, _dst_anchor(dst, os.path.normpath(inside), buffer_side), st))
    return out


#: how a list's lines name the buffer's striped directory (the user cannot know its path here)
_STRIPED = ("$DW_JOB_STRIPED", "${DW_JOB_STRIPED}")


def _buffer_side(path: str, inside: str) -> str:
    """`path` with a leading $DW_JOB_STRIPED made the buffer's directory `inside`."""
    for var in _STRIPED:
        if path == var or path.startswith(var + "/"):
            return inside + path[len(var) :]
    return path


def _read_list(path: str, pair: Pair, inside: str, buffer_side: str) -> list[Pair]:
    """A type=list file: `source destination` per line (absolute sources; a relative
    destination is taken under the pair's destination; $DW_JOB_STRIPED on the buffer's side
    is the buffer's striped directory, `inside`), blank lines and #comments skipped.
    Each entry is a file or a directory, as its source is. The list itself must be a regular
    file of at most LIST_BYTES, opened without following a link or waiting on a FIFO."""
    try:
        fd = os.open(path, _SOURCE)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CopyError(f"{path}: a link; name the list file itself") from None
        raise path_error(path, e) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CopyError(f"{path}: not a regular file (a list must be one)")
        data = os.read(fd, LIST_BYTES + 1)  # one read is enough for a regular file
        while len(data) <= LIST_BYTES and (more := os.read(fd, LIST_BYTES + 1 - len(data))):
            data += more
    except OSError as e:
        raise path_error(path, e) from None
    finally:
        os.close(fd)
    if len(data) > LIST_BYTES:
        raise CopyError(f"{path}: a list of more than {LIST_BYTES >> 20} MiB")
    out: list[Pair] = []
    for number, line in enumerate(os.fsdecode(data).splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 2:
            raise CopyError(f"{path} line {number}: expected 'source destination'")
        if len(out) >= LIST_ENTRIES:
            raise CopyError(f"{path}: more than {LIST_ENTRIES} entries to stage")
        src, dst = words
        if buffer_side == "source":
            src = _buffer_side(src, inside)
        else:
            dst = _buffer_side(dst, inside)
        try:
            kind = "directory" if stat.S_ISDIR(os.lstat(src).st_mode) else "file"
        except OSError as e:
            raise path_error(src, e) from None
        out.append(
            {"type": kind, "source": src, "destination": os.path.join(pair["destination"], dst)}
        )
    return out


# -- resolving destinations without following links ----------------------------------------------

#: (path, O_PATH descriptor) of every destination anchor, longest first: opened by check()
#: before the workers are forked, so they inherit them
_ROOTS: list[tuple[str, int]] = []
#: [the directory resolved last, its descriptor]: a batch shares one (a list of both, which the
#: tests reset; Any: a list's items have one type)
_LAST: list[Any] = ["", -1]


def root_of(path: str) -> tuple[str, int]:
    for root, fd in _ROOTS:
        if _below(path, root):
            return root, fd
    if _ROOTS:  # check() anchors every destination: this is a bug, never a path to follow
        raise CopyError(f"copier failed: {path} is below no checked destination")
    _anchor("/")  # copy_files/copy_chunk called on their own (tests): anchored at /
    return _ROOTS[0]


def _open_beneath(path: str, make: bool) -> int:
    """The directory `path` as an O_PATH descriptor, each component below its anchor opened
    relative to the one above without following a link; missing ones made 0700 with `make`."""
    root, fd = root_of(path)
    fd, at = os.dup(fd), root.rstrip("/")
    try:
        for name in path[len(root) :].split("/"):
            if not name:
                continue
            at += "/" + name
            try:
                nfd = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            raise CopyError(
                f"{at}: a link or not a directory (staging follows no link in a destination)"
            ) from None
        raise path_error(at, e) from None
    return fd


def open_dir(path: str, make: bool = True) -> int:
    """_open_beneath, the last answer kept: files of one batch share their directory."""
    if _LAST[0] != path:
        fd = _open_beneath(path, make)
        if _LAST[1] >= 0:
            os.close(_LAST[1])
        _LAST[:] = [path, fd]
    last: int = _LAST[1]
    return last


def _replaced(dfd: int) -> dict[str, int]:
    """The bytes each regular file already in a destination directory holds: a stage run
    again after a copy cut short (a dacd killed mid-stage) unlinks and makes each anew, so
    that room comes back. A new directory is empty: one getdents."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    try:
        with os.scandir(fd) as it:
            return {
                e.name: e.stat(follow_symlinks=False).st_blocks * 512
                for e in it
                if e.is_file(follow_symlinks=False)
            }
    finally:
        os.close(fd)


def replaced_blocks(dst: str) -> int:
    """What `_replaced` says of one destination file; 0 if it is not there yet (the copy
    itself then reports a link or a missing parent on the way)."""
    try:
        pfd, name = parent(dst)
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except (OSError, CopyError):
        return 0
    return st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0


def parent(path: str, make: bool = False) -> tuple[int, str]:
    """(descriptor of the parent directory, last component) of a destination."""
    above, name = path.rsplit("/", 1)
    return open_dir(above or "/", make), name


def create(path: str, mode: int, flags: int = os.O_WRONLY) -> int:
    """A destination file made anew with `mode`: whatever was there (a link, a hard link to
    another file, a FIFO, a stage run again) is unlinked first, never written through."""
    pfd, name = parent(path)
    flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            return os.open(name, flags, mode, dir_fd=pfd)
        except FileExistsError:
            os.unlink(name, dir_fd=pfd)
            return os.open(name, flags, mode, dir_fd=pfd)
    except OSError as e:
        raise path_error(path, e) from None


def make_sized(path: str, size: int) -> None:
    """A file made anew at its final size (holes), 0600 until its mode is set at the end:
    the chunks of a big file (or a split file's ranges) are written into it in place."""
    fd = create(path, 0o600)
    try:
        os.ftruncate(fd, size)
    except OSError as e:
        raise path_error(path, e) from None
    finally:
        os.close(fd)


def make_link(src: str, dst: str) -> None:
    """The symlink `src` made again at `dst` with the same target (one there replaced)."""
    pfd, name = parent(dst)
    try:
        target = os.readlink(src)
        try:
            os.symlink(target, name, dir_fd=pfd)
        except FileExistsError:
            os.unlink(name, dir_fd=pfd)
            os.symlink(target, name, dir_fd=pfd)
    except OSError as e:
        raise path_error(dst, e) from None


def _open_source(path: str) -> int:
    """A source opened without following a link or waiting on a FIFO; only a regular file."""
    try:
        fd = os.open(path, _SOURCE)
    except OSError as e:
        raise path_error(path, e) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CopyError(f"{path}: not a regular file (FIFOs, devices and sockets are not staged)")
    return fd


# -- copying data (in the workers) ----------------------------------------------------------------

_KERNEL_COPY = [True]  # copy_file_range, until the kernel refuses it across filesystems
#: whether a source's pages are dropped as they are copied: not when the source is the buffer
#: (main sets it from the plan). A stage_out's source is what the job wrote, often still dirty
#: (a checkpoint drained as soon as it is written): POSIX_FADV_DONTNEED would first write it
#: back to the buffer's device, within the stage's time and beside the copy's own writes
#: (1 GiB freshly written: 0.76 s of system time, 0.52 s without, medians of 3;
#: docs/performance.md)
_DROP_SOURCE = [True]
#: one per worker process, reused for every read: private anonymous memory, so each forked
#: worker writes its own copy (mmap's default, MAP_SHARED, would hand every worker the same
#: pages) and a process that only imports this module (dacd, for encode_plan) never touches it
_BUFFER = memoryview(mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE))


#: bench/staging.py's per-server rate cap, nothing else's: DAC_BENCH_RATE bytes per second
#: shared by one copier's workers ((rate, lock pipe's read and write ends, shared mmap holding
#: the time the next byte may go)); empty unless the variable is set (docs/performance.md)
_PACE: list[tuple[float, int, int, mmap.mmap]] = []
PACE_STEP = 1 << 20  # a paced copy moves this much at a time
PACE_BURST = 0.05  # seconds of credit an idle copier may keep


def pace_init() -> None:
    """The token bucket of DAC_BENCH_RATE, before the workers fork (Workers makes it): they
    share it."""
    rate = float(os.environ.get("DAC_BENCH_RATE") or 0)
    if rate > 0 and not _PACE:
        r, w = os.pipe()
        os.write(w, b"x")
        mem = mmap.mmap(-1, 8)  # MAP_SHARED: every worker sees one clock
        struct.pack_into("d", mem, 0, 0.0)
        _PACE[:] = [(rate, r, w, mem)]


def _throttle(n: int) -> None:
    """Wait until `n` more bytes are within the rate (the pipe's one byte is the lock)."""
    if not _PACE:
        return
    rate, r, w, mem = _PACE[0]
    os.read(r, 1)
    try:
        now = time.monotonic()
        due = max(struct.unpack_from("d", mem)[0], now - PACE_BURST) + n / rate
        struct.pack_into("d", mem, 0, due)
    finally:
        os.write(w, b"x")
    if due > now:
        time.sleep(due - now)


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
    n = os.preadv(src_fd, [_BUFFER[: min(count, len(_BUFFER))]], off)
    written = 0
    while written < n:
        written += os.pwrite(dst_fd, _BUFFER[written:n], off + written)
    return n


def _copy_dense(
    src_fd: int, dst_fd: int, start: int, end: int, part: Callable[[int], None] | None = None
) -> None:
    """Every WRITEBACK bytes copied are sent to the disk at once (POSIX_FADV_DONTNEED starts
    writeback without waiting) and the source's pages dropped; a destination step is dropped
    DROP_LAG steps later, its writeback done (pages under writeback stay cached). So the disk
    writes while the copy still reads, a stage of a terabyte does not push everything else out
    of memory (a buffer-side source's pages excepted: _DROP_SOURCE), and the copy reuses the
    same few MiB of page cache instead of taking fresh pages for every byte: on a VM whose host
    backs guest memory on first touch that costs ~3 ms per MiB (docs/performance.md)."""
    off = flushed = start
    written: list[tuple[int, int]] = []  # steps sent to the disk, not yet dropped
    while off < end:
        n = _move(src_fd, dst_fd, min(end - off, PACE_STEP) if _PACE else end - off, off)
        if n == 0:
            raise OSError(errno.EIO, "the source shrank while being copied")
        _throttle(n)
        off += n
        if part:
            part(n)
        if off - flushed >= WRITEBACK:
            if _DROP_SOURCE[0]:
                os.posix_fadvise(src_fd, flushed, off - flushed, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(dst_fd, flushed, off - flushed, os.POSIX_FADV_DONTNEED)
            written.append((flushed, off - flushed))
            if len(written) > DROP_LAG:
                os.posix_fadvise(dst_fd, *written.pop(0), os.POSIX_FADV_DONTNEED)
            flushed = off


def _copy_range(
    src_fd: int, dst_fd: int, start: int, end: int, part: Callable[[int], None] | None = None
) -> None:
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
        _copy_dense(src_fd, dst_fd, data, hole, part)
        pos = hole


def _open_sources(items: list[FileItem]) -> list[int]:
    """Every source of a batch opened and read ahead at once: one cold file after another
    would wait for the disk once each (10,000 small files: 0.46 s of copying, 0.33 s so)."""
    fds: list[int] = []
    try:
        for item in items:
            fd = _open_source(item[0])
            fds.append(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def copy_files(items: list[FileItem]) -> tuple[int, int]:
    """A batch of whole files (src, dst, size, mode, atime, mtime, sparse): (bytes, files).
    A small dense file costs eight system calls: open, fadvise, open (created with its mode),
    read, write, utime, two closes; everything else here is kept out of its way (10,000 files:
    Python's share 0.11 s of 0.28 s before)."""
    sources = _open_sources(items)
    one_read, copied = len(_BUFFER), 0
    try:
        for sfd, (_src, dst, size, mode, atime, mtime, sparse) in zip(sources, items, strict=True):
            dfd = create(dst, mode)
            try:
                if sparse:
                    os.ftruncate(dfd, size)  # holes stay holes
                    _copy_range(sfd, dfd, 0, size)
                elif size <= one_read and not _KERNEL_COPY[0]:  # one read, one write
                    n = os.preadv(sfd, [_BUFFER[:size]], 0)
                    if n < size:
                        raise OSError(errno.EIO, "the source shrank while being copied")
                    written = 0
                    while written < n:
                        written += os.pwrite(dfd, _BUFFER[written:n], written)
                    _throttle(n)
                else:
                    _copy_dense(sfd, dfd, 0, size)
                os.utime(dfd, ns=(atime, mtime))
            except OSError as e:
                raise path_error(dst, e) from None
            finally:
                os.close(dfd)
            copied += size  # holes count as done: they are the file's bytes too
    finally:
        for fd in sources:
            os.close(fd)
    return copied, len(items)


def copy_chunk(item: ChunkItem, part: Callable[[int], None] | None = None) -> int:
    """[start, end) of a big file (src, dst, size, mode, atime, mtime, sparse, start, end) into
    the file the walk made; every PART bytes copied are told to `part` as they go. Returns the
    bytes not told (holes included: they are the file's bytes too)."""
    src, dst, _, _, _, _, sparse, start, end = item
    told = [0, 0]  # bytes told, bytes copied since

    def count(n: int) -> None:
        told[1] += n
        if told[1] >= PART and part is not None:  # always given: count is passed only with it
            part(told[1])
            told[0], told[1] = told[0] + told[1], 0

    sfd = _open_source(src)
    try:
        pfd, name = parent(dst)
        try:
            dfd = os.open(
                name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=pfd
            )
            if not stat.S_ISREG(os.fstat(dfd).st_mode):  # swapped since the walk made it
                os.close(dfd)
                raise OSError(errno.EINVAL, "no longer a regular file")
        except OSError as e:
            raise path_error(dst, e) from None
        try:
            (_copy_range if sparse else _copy_dense)(sfd, dfd, start, end, count if part else None)
        except OSError as e:
            raise path_error(dst, e) from None
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return end - start - told[0]


# -- the workers ----------------------------------------------------------------------------------


def _send(fd: int, message: Task | Result) -> None:
    data = marshal.dumps(message)
    data = struct.pack("<I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _recv(fd: int) -> tuple[Any, ...] | None:
    """The next message (a Task in a worker, a Result in the main process: marshal's, so its
    items are Any), or None at end of file."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, struct.unpack("<I", head)[0])
    if body is None:
        return None
    message: tuple[Any, ...] = marshal.loads(body)
    return message


def _read_exactly(fd: int, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        more = os.read(fd, n - len(data))
        if not more:
            return None
        data += more
    return data


def _serve(tasks: int, results: int) -> None:
    """A worker: tasks in, ("part", bytes, 0) while a chunk goes, then ("ok", bytes, files) or
    ("error", line, 0) per task; leaves when the task pipe closes."""
    while (task := _recv(tasks)) is not None:
        try:
            kind, items = task
            out: Result
            if kind == "files":
                out = ("ok", *copy_files(items))
            else:
                out = ("ok", copy_chunk(items, lambda n: _send(results, ("part", n, 0))), 0)
        except CopyError as e:
            out = ("error", str(e), 0)
        except Exception as e:  # noqa: BLE001 - one line for the user, never a traceback
            out = ("error", f"copier failed: {type(e).__name__}: {e}", 0)
        _send(results, out)


def worker_nice(pairs: list[Pair]) -> int:
    """WORKER_NICE when a pair is a tree to walk (a directory, a list); else 0: nothing to
    yield to."""
    return WORKER_NICE if any(p["type"] != "file" for p in pairs) else 0


class Workers:
    """Forked copy processes, each with its own task and result pipe. multiprocessing's Pool
    did the same at 45 ms more per stage (its import and start: 9 % of 10,000 small files).
    As a context manager: let finish and reaped when the block ends, killed when it raises."""

    def __init__(self, n: int, nice: int = WORKER_NICE) -> None:
        pace_init()
        self.procs: list[tuple[int, int, int]] = []  # (pid, task fd, result fd)
        self.queued: dict[int, int] = {}  # result fd -> tasks in flight
        for _ in range(max(1, n)):
            task_r, task_w = os.pipe()
            result_r, result_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: only its own two ends stay open
                code = 1
                try:
                    os.close(task_w)
                    os.close(result_r)
                    for _, t, r in self.procs:
                        os.close(t)
                        os.close(r)
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    os.nice(nice)
                    _serve(task_r, result_w)
                    code = 0
                finally:
                    os._exit(code)
            os.close(task_r)
            os.close(result_w)
            self.procs.append((pid, task_w, result_r))
            self.queued[result_r] = 0
        self.task_fd = {r: t for _, t, r in self.procs}
        self.poller = select.poll()
        for _, _, r in self.procs:
            self.poller.register(r, select.POLLIN)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.procs:
            self.stop(kill=kind is not None)

    def send(self, task: Task, on_result: OnResult) -> None:
        """To the least busy worker, after waiting for results while every one is full."""
        while min(self.queued.values()) >= QUEUED:
            self.wait(on_result)
        fd = min(self.queued, key=lambda f: self.queued[f])
        self.queued[fd] += 1
        try:
            _send(self.task_fd[fd], task)
        except BrokenPipeError:
            raise CopyError(DIED) from None

    def drain(self, on_result: OnResult) -> None:
        while any(self.queued.values()):
            self.wait(on_result)

    def wait(self, on_result: OnResult, timeout_ms: int = 1000) -> None:
        """Results of whatever workers have some, each given to `on_result(bytes, files)`."""
        for fd, _ in self.poller.poll(timeout_ms):
            message = _recv(fd)
            if message is None:
                raise CopyError(DIED)
            what, value, files = message
            if what == "error":
                raise CopyError(value)
            if what == "ok":
                self.queued[fd] -= 1
            on_result(value, files)
        on_result(0, 0)  # time moves on for the rate even when nothing ended

    def stop(self, kill: bool) -> None:
        """Close the task pipes (workers leave when done) or kill them; reap every one."""
        for pid, t, _r in self.procs:
            if kill:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.close(t)
        for pid, _t, r in self.procs:
            os.waitpid(pid, 0)
            os.close(r)
        self.procs = []


# -- the walk (in the main process) ---------------------------------------------------------------


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def set_mode_times(path: str, st: os.stat_result, directory: bool) -> None:
    """The source's mode and times, set through a descriptor opened without following."""
    if path in (r for r, _ in _ROOTS):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_of(path)[1])
    else:
        pfd, name = parent(path)
        fd = os.open(
            name,
            os.O_RDONLY
            | os.O_NOFOLLOW
            | os.O_NONBLOCK
            | os.O_CLOEXEC
            | (os.O_DIRECTORY if directory else 0),
            dir_fd=pfd,
        )
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


def _data_chunks(src: str, size: int, chunk: int) -> list[tuple[int, int]]:
    """[start, end) ranges of a sparse file, each holding at most `chunk` bytes of data and
    none starting in a hole: as many as its data needs, whatever its apparent size (an 8 EiB
    file with 1 MiB of data is one)."""
    fd = _open_source(src)
    out: list[tuple[int, int]] = []
    start, have, pos = None, 0, 0
    try:
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            if data >= size:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
            while data < hole:  # a long extent in pieces of `chunk`
                if start is None:
                    start = data
                step = min(hole - data, chunk - have)
                data, have = data + step, have + step
                if have >= chunk:
                    out.append((start, data))
                    start, have = None, 0
            pos = hole
    except OSError as e:
        raise path_error(src, e) from None
    finally:
        os.close(fd)
    if start is not None:
        out.append((start, pos))
    return out


class Copy:
    """One stage: walks the checked pairs, hands files to the workers as they are found,
    keeps the counts for progress, sets modes and times at the end."""

    def __init__(self, workers: Workers, report: Report, chunk: int = CHUNK) -> None:
        self.workers, self.report, self.chunk = workers, report, chunk
        self.dirs: list[tuple[str, os.stat_result]] = []  # in the order made: parents first
        self.big: list[tuple[str, os.stat_result]] = []
        self.batch: list[FileItem] = []
        self.batch_bytes = 0
        self.bytes_total = self.files_total = self.bytes_done = self.files_done = 0
        self.counting = True  # until the walk ends: the totals are what it found so far
        self.free: dict[int, int] = {}  # bytes still free per destination filesystem
        self.left, self.anchor = 0, ""  # the current pair's: counted down as files are found
        self.dev = 0  # ... and its filesystem

    def _room(self, dst: str) -> None:
        """The current pair's destination filesystem: what is left of its free space."""
        if self.anchor:
            self.free[self.dev] = self.left
        self.anchor, fd = root_of(dst)
        self.dev = os.fstat(fd).st_dev
        if self.dev not in self.free:
            vfs = os.fstatvfs(fd)
            self.free[self.dev] = vfs.f_bavail * vfs.f_frsize
        self.left = self.free[self.dev]

    def _full(self) -> CopyError:
        return CopyError(
            f"{self.anchor}: not enough space for the data to stage "
            f"({size_text(self.free[self.dev])} free)"
        )

    def run(self, pairs: list[Checked]) -> None:
        for kind, _src, dst, st in pairs:  # named files: all counted before anything is copied
            if kind != "directory" and stat.S_ISREG(st.st_mode):
                self._room(dst)
                self.left -= min(st.st_size, st.st_blocks * 512) - replaced_blocks(dst)
                if self.left < 0:
                    raise self._full()
        self.free.clear()
        self.anchor = ""
        for kind, src, dst, st in pairs:
            self._room(dst)
            if kind == "directory":
                self._walk(src, dst, st)
            else:
                open_dir(os.path.dirname(dst))
                self._entry(src, dst, st)
        self.drain()
        # deepest first: a time set is a change above
        for (dst, st), directory in [(b, False) for b in self.big] + [
            (d, True) for d in self.dirs[::-1]
        ]:
            try:
                set_mode_times(dst, st, directory)
            except OSError as e:
                raise path_error(dst, e) from None
        self.ended()

    def drain(self) -> None:
        """The last batch sent, the totals final, every worker's tasks done."""
        self.flush()
        self.counting = False
        self.workers.drain(self.on_result)

    def ended(self) -> None:
        """The last progress line: every file done."""
        self.files_done = self.files_total
        self.report(self, final=True)

    def _walk(self, src: str, dst: str, st: os.stat_result) -> None:
        """Depth first with a stack (trees may be deeper than Python's recursion). A small
        regular file, nearly every entry, goes straight into the batch: the walk runs beside
        the workers on the same cores, and its share per file counts (os.path.join and a
        call per file were a third of it). FIFOs, devices and sockets met in a tree are not
        data: skipped, never opened (one named as a source is refused)."""
        todo = [(src, dst, st)]
        chunk, batch = self.chunk, self.batch
        while todo:
            src, dst, st = todo.pop()
            old = _replaced(open_dir(dst))
            self.dirs.append((dst, st))
            try:
                with os.scandir(src) as it:
                    entries = list(it)
            except OSError as e:
                raise path_error(src, e) from None
            prefix = dst.rstrip("/") + "/"
            for entry in entries:
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError as e:
                    raise path_error(entry.path, e) from None
                mode, size = est.st_mode, est.st_size
                if stat.S_ISREG(mode) and size <= chunk:
                    sparse = est.st_blocks * 512 < size
                    self.left -= (est.st_blocks * 512 if sparse else size) - old.get(entry.name, 0)
                    if self.left < 0:
                        raise self._full()
                    batch.append(
                        (
                            entry.path,
                            prefix + entry.name,
                            size,
                            mode & 0o7777,
                            est.st_atime_ns,
                            est.st_mtime_ns,
                            sparse,
                        )
                    )
                    self.files_total += 1
                    self.bytes_total += size
                    self.batch_bytes += size
                    if len(batch) >= BATCH_FILES or self.batch_bytes >= BATCH_BYTES:
                        self.flush()
                        batch = self.batch
                elif stat.S_ISDIR(mode):
                    todo.append((entry.path, prefix + entry.name, est))
                else:
                    self._entry(entry.path, prefix + entry.name, est)
                    batch = self.batch

    def _entry(self, src: str, dst: str, st: os.stat_result) -> None:
        """A file, a big file or a symlink; sockets, fifos and devices are not data: skipped."""
        if stat.S_ISLNK(st.st_mode):
            make_link(src, dst)
            self.files_total += 1
            self.files_done += 1
            return
        if not stat.S_ISREG(st.st_mode):
            return
        size, sparse = st.st_size, st.st_blocks * 512 < st.st_size
        self.left -= (st.st_blocks * 512 if sparse else size) - replaced_blocks(dst)
        if self.left < 0:
            raise self._full()
        self.files_total += 1
        self.bytes_total += size
        item = (src, dst, size, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns, sparse)
        if size <= self.chunk:
            self.add(item)
            return
        make_sized(dst, size)
        self.big.append((dst, st))
        ranges = (
            _data_chunks(src, size, self.chunk)
            if sparse
            else [(start, min(start + self.chunk, size)) for start in range(0, size, self.chunk)]
        )
        self.bytes_done += size - sum(end - start for start, end in ranges)  # the holes: done
        for start, end in ranges:
            self.workers.send(("chunk", item + (start, end)), self.on_result)

    def add(self, item: FileItem) -> None:
        """A whole file (src, dst, size, mode, atime, mtime, sparse) into the batch, the batch
        sent when full."""
        self.batch.append(item)
        self.batch_bytes += item[2]
        if len(self.batch) >= BATCH_FILES or self.batch_bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            self.workers.send(("files", self.batch), self.on_result)
            self.batch, self.batch_bytes = [], 0

    def on_result(self, copied: int, files: int) -> None:
        self.bytes_done += copied
        self.files_done += files
        self.report(self)


PLAN = b"dac-copier-plan/1"


def encode_plan(
    pairs: list[Pair], inside: str, buffer_side: str, workers: int, chunk: int = CHUNK
) -> bytes:
    """The plan as dacd writes it to the copier's stdin: fields separated by NUL, which no path
    holds. Not JSON: importing json (and re, enum, functools with it) cost the copier 10-15 ms
    at every start, against 0.55 s for 10,000 small files (docs/performance.md)."""
    fields = [inside, buffer_side, str(workers), str(chunk)]
    for pair in pairs:
        fields += [pair["type"], pair["source"], pair["destination"]]
    if any("\0" in f for f in fields):
        raise ValueError("a path holds a NUL byte")
    return b"\0".join([PLAN] + [os.fsencode(f) for f in fields])


def decode_plan(data: bytes) -> tuple[list[Pair], str, str, int, int]:
    """(pairs, inside, buffer_side, workers, chunk) from encode_plan's bytes."""
    fields = data.split(b"\0")
    if fields[0] != PLAN or len(fields) < 5 or (len(fields) - 5) % 3:
        raise CopyError("copier failed: stdin holds no plan")
    f = [os.fsdecode(x) for x in fields]
    pairs: list[Pair] = [
        {"type": t, "source": s, "destination": d}
        for t, s, d in zip(f[5::3], f[6::3], f[7::3], strict=False)
    ]
    return pairs, f[1], f[2], int(f[3]), int(f[4])


def progress_line(c: Copy, rate: int, eta: float | None) -> str:
    """A JSON line built by hand: numbers and booleans only (see encode_plan for why)."""
    return (
        f'{{"bytes_done": {c.bytes_done}, "bytes_total": {c.bytes_total}, '
        f'"files_done": {c.files_done}, "files_total": {c.files_total}, "rate": {rate}, '
        f'"eta": {"null" if eta is None else eta}, '
        f'"counting": {"true" if c.counting else "false"}}}\n'
    )


def emit(line: str) -> None:
    """One line of the copier's protocol to dacd, at once."""
    sys.stdout.write(line)
    sys.stdout.flush()


def fail(message: str) -> int:
    """The copier's one error line; its exit status."""
    import json  # only on the way out: a failed stage can spend the 10-15 ms

    emit(json.dumps({"error": message}) + "\n")
    return 1


def reporter() -> Report:
    """report(copy, final=False): a progress line, four times a second while the copy is
    young, so a stage of a few seconds still shows where it is; once a second after that (each
    line is an etcd write). One for each copier process (this one's and a share's)."""
    started = last = time.monotonic()

    def report(c: Copy, final: bool = False) -> None:
        nonlocal last
        now = time.monotonic()
        if final or now - last >= (0.25 if now - started < 3.0 else 1.0):
            last = now
            rate = c.bytes_done / max(now - started, 1e-3)
            left = c.bytes_total - c.bytes_done
            eta = (
                None
                if c.counting or (left and not rate)
                else round(left / rate, 1)
                if left
                else 0.0
            )
            emit(progress_line(c, round(rate), eta))

    return report


def copy_plan(plan: bytes, report: Report) -> None:
    """The single copier's stage: every pair of encode_plan's `plan` copied."""
    pairs, inside, buffer_side, n, chunk = decode_plan(plan)
    checked = check(pairs, inside, buffer_side)
    _DROP_SOURCE[0] = buffer_side != "source"  # before the workers fork: theirs too
    with Workers(n, worker_nice(pairs)) as workers:
        copy = Copy(workers, report, chunk)
        emit(progress_line(copy, 0, None))
        copy.run(checked)


def main(stage: Callable[[bytes, Report], None] = copy_plan) -> int:
    """Every copier process's main, this file's and a share copier's (whose `stage` plays its
    role): `stage` given the plan on stdin and the progress reporter, then {"done": true} and
    exit 0; any failure one line, never a traceback (for Slurm's Reason), and exit 1."""
    os.umask(0)  # files are created with their source's mode; directories get theirs at the end
    report = reporter()
    try:
        stage(sys.stdin.buffer.read(), report)
    except CopyError as e:
        return fail(str(e))
    except Exception as e:  # noqa: BLE001 - one line, never a traceback, for Slurm's Reason
        return fail(f"copier failed: {type(e).__name__}: {e}")
    emit('{"done": true}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
