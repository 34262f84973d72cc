"""The copier: stage data into or out of a buffer as the job's user.

dacd starts `python3 -I -S dacd/copier.py` (standard library only, no site packages) with the
user's uid, gid and supplementary groups already taken (subprocess does setgroups/setgid/setuid
before exec), so not one path is opened as root and the kernel enforces the user's permissions.
The plan comes on stdin as encode_plan writes it: the buffer's root, which side of each pair is
in the buffer, the number of workers, the chunk size, then each pair's type (file, directory or
list), source and destination.

Stdout carries JSON lines: progress (bytes and files done and in total, the rate in bytes per
second, the ETA in seconds, and `counting` while the tree is still being walked) at most once a
second, then {"done": true} or {"error": "<one line naming the path>"}; the exit status is 0 only
when everything was copied.

How: every pair is checked first (absolute, no '..', the buffer side resolving inside the buffer,
the source there); then the tree is walked (lstat, never following a link) while a pool of
forked workers already copies what the walk has found: directories are made as they are
reached, symlinks are recreated as symlinks, files travel to the workers in batches, big files
in chunks so one huge file uses every worker. A worker opens a batch's sources and asks the
kernel to read them all ahead (POSIX_FADV_WILLNEED) before copying the first, so a cold disk
serves many reads at once; data moves with copy_file_range (pread/pwrite across filesystems),
skipping holes (SEEK_DATA/SEEK_HOLE) so sparse files stay sparse. Modes and times are set last,
directories deepest first.
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

CHUNK = 256 << 20  # a big file is split into pieces of this size
BATCH_BYTES = 32 << 20  # small files travel to a worker in batches up to this size...
BATCH_FILES = 64  # ...or this many files (all read ahead at once)
QUEUED = 2  # tasks in flight per worker: the next is there when one ends
PART = 64 << 20  # a chunk's worker reports its progress every this many bytes
WRITEBACK = 8 << 20  # a big copy is pushed to the disk in steps of this size
#: the workers yield the CPU to the walk that feeds them (and to dacd beside them): with 4
#: workers on 2 cores the walk got 2/5 of a core and was what they waited for; 10,000 small
#: files 0.61 s at nice 0, 0.57 s at 3, 0.55 s at 10 (docs/performance.md)
WORKER_NICE = 10
DIED = "copier failed: a copy worker died"  # killed: by the OOM killer, an admin


class CopyError(Exception):
    """One line for the user, naming the path."""


def _fail(path: str, e: OSError) -> CopyError:
    return CopyError(f"{path}: {e.strerror or e}")


# -- checking the pairs ---------------------------------------------------------------------------

def _inside(path: str, root: str) -> bool:
    """`path` resolves inside `root`: its deepest existing ancestor's real path does."""
    probe = path
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    real = os.path.join(os.path.realpath(probe), os.path.relpath(path, probe))
    return os.path.normpath(real) == root or os.path.normpath(real).startswith(root + os.sep)


def check(pairs: list[dict], inside: str, buffer_side: str) -> list[tuple]:
    """Every pair (lists expanded) as (type, source, destination, lstat of the source), each one
    checked before anything is copied."""
    root = os.path.realpath(inside)
    todo, out = pairs[::-1], []  # a stack, in order: a list of 100,000 lines pops in O(1)
    while todo:
        pair = todo.pop()
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
            todo += _read_list(src, pair)[::-1]
        elif kind == "directory" and not stat.S_ISDIR(st.st_mode):
            raise CopyError(f"{src}: not a directory")
        elif kind != "directory" and not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            raise CopyError(f"{src}: not a regular file")
        else:
            out.append((kind, src, dst, st))
    return out


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


# -- copying data (in the workers) ----------------------------------------------------------------

_KERNEL_COPY = [True]  # copy_file_range, until the kernel refuses it across filesystems
#: one per worker process, reused for every read: private anonymous memory, so each forked
#: worker writes its own copy (mmap's default, MAP_SHARED, would hand every worker the same
#: pages) and a process that only imports this module (dacd, for encode_plan) never touches it
_BUFFER = memoryview(mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE))


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


def _copy_dense(src_fd: int, dst_fd: int, start: int, end: int, part=None) -> None:
    """Every WRITEBACK bytes copied are sent to the disk at once and dropped from the page
    cache, the source's too (POSIX_FADV_DONTNEED starts writeback without waiting): the disk
    writes while the copy still reads instead of after it (2 GiB: the sync after it 1.2 s
    instead of 2.4 s), and a stage of a terabyte does not push everything else out of memory."""
    off = flushed = start
    while off < end:
        n = _move(src_fd, dst_fd, end - off, off)
        if n == 0:
            raise OSError(errno.EIO, "the source shrank while being copied")
        off += n
        if part:
            part(n)
        if off - flushed >= WRITEBACK:
            os.posix_fadvise(dst_fd, flushed, off - flushed, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(src_fd, flushed, off - flushed, os.POSIX_FADV_DONTNEED)
            flushed = off


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int, part=None) -> None:
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


def _open_dst(dst: str, mode: int) -> int:
    """A whole file is created with its final mode (umask is 0 here); one that already exists
    (a stage run again) is truncated and given the mode."""
    try:
        try:
            return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            fd = os.open(dst, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
            os.fchmod(fd, mode)
            return fd
    except OSError as e:
        raise _fail(dst, e) from None


def _open_sources(items: list) -> list[int]:
    """Every source of a batch opened and read ahead at once: one cold file after another
    would wait for the disk once each (10,000 small files: 0.46 s of copying, 0.33 s so)."""
    fds: list[int] = []
    try:
        for item in items:
            try:
                fd = os.open(item[0], os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as e:
                raise _fail(item[0], e) from None
            fds.append(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def copy_files(items: list) -> tuple[int, int]:
    """A batch of whole files (src, dst, size, mode, atime, mtime, sparse): (bytes, files).
    A small dense file costs eight system calls: open, fadvise, open (created with its mode),
    read, write, utime, two closes; everything else here is kept out of its way (10,000 files:
    Python's share 0.11 s of 0.28 s before)."""
    sources = _open_sources(items)
    one_read, copied = len(_BUFFER), 0
    try:
        for sfd, (src, dst, size, mode, atime, mtime, sparse) in zip(sources, items):
            dfd = _open_dst(dst, mode)
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
                else:
                    _copy_dense(sfd, dfd, 0, size)
                os.utime(dfd, ns=(atime, mtime))
            except OSError as e:
                raise _fail(dst, e) from None
            finally:
                os.close(dfd)
            copied += size  # holes count as done: they are the file's bytes too
    finally:
        for fd in sources:
            os.close(fd)
    return copied, len(items)


def copy_chunk(item: tuple, part=None) -> int:
    """[start, end) of a big file (src, dst, size, mode, atime, mtime, sparse, start, end) into
    the file the walk made; every PART bytes copied are told to `part` as they go. Returns the
    bytes not told (holes included: they are the file's bytes too)."""
    src, dst, _, _, _, _, sparse, start, end = item
    told = [0, 0]  # bytes told, bytes copied since

    def count(n: int) -> None:
        told[1] += n
        if told[1] >= PART:
            part(told[1])
            told[0], told[1] = told[0] + told[1], 0
    try:
        sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise _fail(src, e) from None
    try:
        try:
            dfd = os.open(dst, os.O_WRONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise _fail(dst, e) from None
        try:
            (_copy_range if sparse else _copy_dense)(sfd, dfd, start, end, count if part else None)
        except OSError as e:
            raise _fail(dst, e) from None
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return end - start - told[0]


# -- the workers ----------------------------------------------------------------------------------

def _send(fd: int, message) -> None:
    data = marshal.dumps(message)
    data = struct.pack("<I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _recv(fd: int):
    """The next message, or None at end of file."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, struct.unpack("<I", head)[0])
    return None if body is None else marshal.loads(body)


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
            if kind == "files":
                out = ("ok", *copy_files(items))
            else:
                out = ("ok", copy_chunk(items, lambda n: _send(results, ("part", n, 0))), 0)
        except CopyError as e:
            out = ("error", str(e), 0)
        except Exception as e:  # noqa: BLE001 - one line for the user, never a traceback
            out = ("error", f"copier failed: {type(e).__name__}: {e}", 0)
        _send(results, out)


class Workers:
    """Forked copy processes, each with its own task and result pipe. multiprocessing's Pool
    did the same at 45 ms more per stage (its import and start: 9 % of 10,000 small files)."""

    def __init__(self, n: int):
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
                    os.nice(WORKER_NICE)
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

    def send(self, task: tuple, on_result) -> None:
        """To the least busy worker, after waiting for results while every one is full."""
        while min(self.queued.values()) >= QUEUED:
            self.wait(on_result)
        fd = min(self.queued, key=self.queued.get)
        self.queued[fd] += 1
        try:
            _send(self.task_fd[fd], task)
        except BrokenPipeError:
            raise CopyError(DIED) from None

    def drain(self, on_result) -> None:
        while any(self.queued.values()):
            self.wait(on_result)

    def wait(self, on_result, timeout_ms: int = 1000) -> None:
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
        for pid, t, r in self.procs:
            if kill:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.close(t)
        for pid, t, r in self.procs:
            os.waitpid(pid, 0)
            os.close(r)
        self.procs = []


# -- the walk (in the main process) ---------------------------------------------------------------

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


class Copy:
    """One stage: walks the checked pairs, hands files to the workers as they are found,
    keeps the counts for progress, sets modes and times at the end."""

    def __init__(self, workers: Workers, report, chunk: int = CHUNK):
        self.workers, self.report, self.chunk = workers, report, chunk
        self.dirs: list[tuple[str, os.stat_result]] = []  # in the order made: parents first
        self.big: list[tuple[str, os.stat_result]] = []
        self.batch: list[tuple] = []
        self.batch_bytes = 0
        self.bytes_total = self.files_total = self.bytes_done = self.files_done = 0
        self.counting = True  # until the walk ends: the totals are what it found so far

    def run(self, pairs: list[tuple]) -> None:
        for kind, src, dst, st in pairs:
            if kind == "directory":
                self._walk(src, dst, st)
            else:
                try:
                    _makedirs(os.path.dirname(dst))
                except OSError as e:
                    raise _fail(os.path.dirname(dst), e) from None
                self._entry(src, dst, st)
        self._flush()
        self.counting = False
        self.workers.drain(self._done)
        for dst, st in self.big + self.dirs[::-1]:  # deepest first: a time set is a change above
            try:
                os.chmod(dst, stat.S_IMODE(st.st_mode))
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            except OSError as e:
                raise _fail(dst, e) from None
        self.files_done = self.files_total
        self.report(self, final=True)

    def _walk(self, src: str, dst: str, st: os.stat_result) -> None:
        """Depth first with a stack (trees may be deeper than Python's recursion). A small
        regular file, nearly every entry, goes straight into the batch: the walk runs beside
        the workers on the same cores, and its share per file counts (os.path.join and a
        call per file were a third of it)."""
        todo = [(src, dst, st)]
        chunk, batch = self.chunk, self.batch
        while todo:
            src, dst, st = todo.pop()
            try:
                _makedirs(dst)
            except OSError as e:
                raise _fail(dst, e) from None
            self.dirs.append((dst, st))
            try:
                with os.scandir(src) as it:
                    entries = list(it)
            except OSError as e:
                raise _fail(src, e) from None
            prefix = dst.rstrip("/") + "/"
            for entry in entries:
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError as e:
                    raise _fail(entry.path, e) from None
                mode, size = est.st_mode, est.st_size
                if stat.S_ISREG(mode) and size <= chunk:
                    batch.append((entry.path, prefix + entry.name, size, mode & 0o7777,
                                  est.st_atime_ns, est.st_mtime_ns, est.st_blocks * 512 < size))
                    self.files_total += 1
                    self.bytes_total += size
                    self.batch_bytes += size
                    if len(batch) >= BATCH_FILES or self.batch_bytes >= BATCH_BYTES:
                        self._flush()
                        batch = self.batch
                elif stat.S_ISDIR(mode):
                    todo.append((entry.path, prefix + entry.name, est))
                else:
                    self._entry(entry.path, prefix + entry.name, est)
                    batch = self.batch

    def _entry(self, src: str, dst: str, st: os.stat_result) -> None:
        """A file, a big file or a symlink; sockets, fifos and devices are not data: skipped."""
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(src)
                if os.path.lexists(dst):
                    os.unlink(dst)
                os.symlink(target, dst)
            except OSError as e:
                raise _fail(dst, e) from None
            self.files_total += 1
            self.files_done += 1
            return
        if not stat.S_ISREG(st.st_mode):
            return
        self.files_total += 1
        self.bytes_total += st.st_size
        item = (src, dst, st.st_size, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns,
                st.st_blocks * 512 < st.st_size)
        if st.st_size <= self.chunk:
            self.batch.append(item)
            self.batch_bytes += st.st_size
            if len(self.batch) >= BATCH_FILES or self.batch_bytes >= BATCH_BYTES:
                self._flush()
            return
        try:  # chunks write into a file of the final size, given its mode at the end
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            os.ftruncate(fd, st.st_size)
            os.close(fd)
        except OSError as e:
            raise _fail(dst, e) from None
        self.big.append((dst, st))
        for start in range(0, st.st_size, self.chunk):
            self.workers.send(("chunk", item + (start, min(start + self.chunk, st.st_size))),
                              self._done)

    def _flush(self) -> None:
        if self.batch:
            self.workers.send(("files", self.batch), self._done)
            self.batch, self.batch_bytes = [], 0

    def _done(self, copied: int, files: int) -> None:
        self.bytes_done += copied
        self.files_done += files
        self.report(self)


PLAN = b"dac-copier-plan/1"


def encode_plan(pairs: list[dict], inside: str, buffer_side: str, workers: int,
                chunk: int = CHUNK) -> bytes:
    """The plan as dacd writes it to the copier's stdin: fields separated by NUL, which no path
    holds. Not JSON: importing json (and re, enum, functools with it) cost the copier 10-15 ms
    at every start, against 0.55 s for 10,000 small files (docs/performance.md)."""
    fields = [inside, buffer_side, str(workers), str(chunk)]
    for pair in pairs:
        fields += [pair["type"], pair["source"], pair["destination"]]
    if any("\0" in f for f in fields):
        raise ValueError("a path holds a NUL byte")
    return b"\0".join([PLAN] + [os.fsencode(f) for f in fields])


def decode_plan(data: bytes) -> tuple[list[dict], str, str, int, int]:
    """(pairs, inside, buffer_side, workers, chunk) from encode_plan's bytes."""
    fields = data.split(b"\0")
    if fields[0] != PLAN or len(fields) < 5 or (len(fields) - 5) % 3:
        raise CopyError("copier failed: stdin holds no plan")
    f = [os.fsdecode(x) for x in fields]
    pairs = [{"type": t, "source": s, "destination": d}
             for t, s, d in zip(f[5::3], f[6::3], f[7::3])]
    return pairs, f[1], f[2], int(f[3]), int(f[4])


def _progress_line(c: Copy, rate: int, eta: float | None) -> str:
    """A JSON line built by hand: numbers and booleans only (see encode_plan for why)."""
    return (f'{{"bytes_done": {c.bytes_done}, "bytes_total": {c.bytes_total}, '
            f'"files_done": {c.files_done}, "files_total": {c.files_total}, "rate": {rate}, '
            f'"eta": {"null" if eta is None else eta}, '
            f'"counting": {"true" if c.counting else "false"}}}\n')


def main() -> int:
    def emit(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    def fail(message: str) -> int:
        import json  # only on the way out: a failed stage can spend the 10-15 ms
        emit(json.dumps({"error": message}) + "\n")
        return 1
    os.umask(0)  # files are created with their source's mode; directories get theirs at the end
    started = last = time.monotonic()

    def report(c: Copy, final: bool = False) -> None:
        nonlocal last
        now = time.monotonic()
        if final or now - last >= 1.0:
            last = now
            rate = c.bytes_done / max(now - started, 1e-3)
            left = c.bytes_total - c.bytes_done
            eta = (None if c.counting or (left and not rate)
                   else round(left / rate, 1) if left else 0.0)
            emit(_progress_line(c, round(rate), eta))
    workers = None
    try:
        pairs, inside, buffer_side, n, chunk = decode_plan(sys.stdin.buffer.read())
        pairs = check(pairs, inside, buffer_side)
        workers = Workers(n)
        copy = Copy(workers, report, chunk)
        emit(_progress_line(copy, 0, None))
        copy.run(pairs)
        workers.stop(kill=False)
    except CopyError as e:
        return fail(str(e))
    except Exception as e:  # noqa: BLE001 - one line, never a traceback, for Slurm's Reason
        return fail(f"copier failed: {type(e).__name__}: {e}")
    finally:
        if workers and workers.procs:
            workers.stop(kill=True)
    emit('{"done": true}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
