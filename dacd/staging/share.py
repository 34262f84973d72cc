"""A stage split across the buffer's storage servers: the plan, and each server's share of it.

The copy is the copier's (dacd/staging/copier.py): the same process started the same way (the user's
uid, gid and groups taken before exec, rlimits, its own process group, the stage's timeout),
the same checks of every pair, the same walk (lstat only: no link followed, FIFOs, devices and
sockets skipped), the same destinations opened beneath their anchors, the same workers. This
module adds what a split needs, in three roles a server's copier plays:

    prepare   the primary, once: walk the sources, check the room, make every directory, every
              symlink and every split file at its final size (sparse: ftruncate); say the
              plan, then copy the primary's own share from that walk
    share i   each other server: walk again, check the walk is the planned one
              (its digest), deal the same shares (a pure function), copy its own: whole files
              made anew with their mode and times, byte ranges pwritten in place (holes
              skipped: SEEK_DATA/SEEK_HOLE, so sparse stays sparse)
    finish    the primary, once every share is done: walk again, check the digest, set the
              split files' modes and times and the directories', deepest first

The plan is small by construction. What is recorded (in etcd, per buffer and stage:
`stageplans/<buffer>/<step>`, a StagePlan, written by the primary's dacd:
dacd/staging/split_primary.py's Across) is the walk's digest
(BLAKE2b of every entry's relative path, kind, size, mode and mtime, in walk order), the server
list and its order, the split threshold and each share's totals: tens of bytes per server,
whatever the tree. The file lists are not recorded: every server walks the source itself
(metadata only: a walk of 10,000 files takes ~50 ms against seconds of copying) and deals the
same shares from it, since `deal` is a pure function of the walk, sorted by name. A walk that
differs from the planned one (the user changed the source mid-stage) fails that share naming
the source, rather than copy a file twice or not at all. So a plan never nears etcd's value
limit (1.5 MiB) and a restarted dacd needs only the record to resume its share.

Dealing (`deal`): a file holding more than SPLIT bytes of data (64 MiB) is cut into ranges of
about SPLIT bytes of data each, their length rounded up to ALIGN (1 MiB: no two servers write
one page, nor one 1 MiB Lustre stripe); every other file goes whole. 64 MiB because the bound
below is one piece: smaller pieces even the shares out better, and a piece still costs only an
open and a few calls against its 64 MiB (3 ms at a real server's 24 GB/s, ~0.1 s here); 4 files
of 128 MiB give 8 pieces, one per server of 8. Each piece weighs its data bytes plus FILE_COST
(the creates, opens and utimes a small file costs in byte-equivalents), and pieces go heaviest
first to the least loaded share (LPT), ties to the lowest index. So every byte of every file is
in exactly one piece, and two shares' weights differ by at most one piece: SPLIT + ALIGN +
FILE_COST (tests/unit/dacd/test_copy_share.py).

This file is run by the user's interpreter as `python3 -I -S /dev/fd/M /dev/fd/N`, M this
file and N the copier, both opened by dacd as root (dacd/staging/run.py). With no dac on the
path it compiles the copier from N into a module of its own and becomes the same
standard-library-only process, through the copier's public names and its `main`. Why the
copier's source from a descriptor, not an import of a module of shared primitives: the user's
process reaches no file of dac's by name (dac may be installed where the user cannot go, a
clone under /root, 0700; and `-I -S` searches only the standard library, so nothing the user
can write is imported), so every file of dac's it runs is one dacd opened as root and passed as
a descriptor. One copier file keeps that to one descriptor for the single copier, the common
case: it runs directly, with no loader, and compiles nothing it does not run; the share copier,
which uses nearly all of the copier, compiles it from the second descriptor. dacd and the tests
import both as modules of dacd.staging instead.
"""

from __future__ import annotations

import heapq
import os
import stat
import sys
import types

TYPE_CHECKING = False  # typing's own without importing typing, as the copier's
if TYPE_CHECKING:  # mypy: True; nothing here runs
    from dacd.staging.copier import Checked, Pair, Report

    #: a share's piece: (file index in the walk, start, end, whole)
    Piece = tuple[int, int, int, bool]

try:  # dacd and the tests import it as a module of dacd
    from dacd.staging import copier
except ImportError:  # the user's copier: -I -S, no dac on the path; the copier's file on argv[1]
    copier = types.ModuleType("copier")
    with open(sys.argv[1], "rb") as _f:
        exec(compile(_f.read(), "dacd/staging/copier.py", "exec"), copier.__dict__)
    sys.modules["copier"] = copier

CopyError = copier.CopyError
SPLIT = 64 << 20  # a file with more data than this is cut into ranges across servers
ALIGN = 1 << 20  # a range starts on a multiple of this
FILE_COST = 64 << 10  # what a file weighs beyond its data (opens, creates, utimes)
MAGIC = b"dac-copier-share/1"
ROLES = ("prepare", "share", "finish")


# -- dealing (pure) -------------------------------------------------------------------------------


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def pieces(size: int, data: int, split: int = SPLIT) -> list[tuple[int, int]]:
    """[start, end) ranges covering a file of apparent `size` holding `data` bytes: one when
    `data` <= `split`, else ceil(data / split) of equal length rounded up to ALIGN."""
    if data <= split or size <= ALIGN:
        return [(0, size)]
    step = _ceil(_ceil(size, _ceil(data, split)), ALIGN) * ALIGN
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def deal(files: list[tuple[int, int]], n: int, split: int = SPLIT) -> list[list[Piece]]:
    """Files as (size, data bytes), in walk order, dealt into `n` shares of (file index, start,
    end, whole) in walk order; `whole` False for a range of a split file."""
    items: list[tuple[int, int, int, int, bool]] = []  # (-weight, index, start, end, whole)
    for i, (size, data) in enumerate(files):
        ranges = pieces(size, data, split) if n > 1 else [(0, size)]
        for start, end in ranges:
            share = (end - start) * data // size if size else 0
            items.append((-(share + FILE_COST), i, start, end, len(ranges) == 1))
    items.sort()
    loads = [(0, k) for k in range(n)]
    shares: list[list[Piece]] = [[] for _ in range(n)]
    for neg, i, start, end, whole in items:
        load, k = heapq.heappop(loads)
        shares[k].append((i, start, end, whole))
        heapq.heappush(loads, (load - neg, k))
    for dealt in shares:
        dealt.sort()
    return shares


def weight(files: list[tuple[int, int]], share: list[Piece]) -> int:
    """What `deal` counted for a share."""
    return sum(
        (end - start) * files[i][1] // files[i][0] + FILE_COST if files[i][0] else FILE_COST
        for i, start, end, _ in share
    )


# -- the walk (as the user) -----------------------------------------------------------------------


class Listing:
    """One walk of every checked pair, sorted by name so every server walks it alike: the
    directories (parents first), links and regular files as (source, destination, lstat),
    and the digest of it all."""

    def __init__(self) -> None:
        import hashlib  # here: the single copier never pays for it

        self.dirs: list[tuple[str, str, os.stat_result]] = []
        self.links: list[tuple[str, str, os.stat_result]] = []
        self.files: list[tuple[str, str, os.stat_result]] = []
        #: what prepare makes, in the order the single copier meets it: ("d" | "l" | "f", the
        #: index in dirs, links or files) or ("p", a file pair's parent directory)
        self.order: list[tuple[str, int | str]] = []
        self._hash = hashlib.blake2b(digest_size=16)

    def digest(self) -> str:
        return self._hash.hexdigest()

    def _note(self, kind: bytes, rel: str, st: os.stat_result) -> None:
        size = st.st_size if kind != b"d" else 0  # a directory's size is its entries' count
        self._hash.update(
            b"%s\0%s\0%d\0%o\0%d\n"
            % (kind, os.fsencode(rel), size, st.st_mode, st.st_mtime_ns if kind == b"f" else 0)
        )

    def add(self, src: str, dst: str, st: os.stat_result, rel: str) -> None:
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            self.order.append(("l", len(self.links)))
            self.links.append((src, dst, st))
            self._note(b"l", rel, st)
        elif stat.S_ISREG(mode):
            self.order.append(("f", len(self.files)))
            self.files.append((src, dst, st))
            self._note(b"f", rel, st)

    def walk(self, n: int, src: str, dst: str, st: os.stat_result) -> None:
        """Depth first, children by name; only regular files, links and directories."""
        todo = [(src, dst, st, f"{n}:")]
        while todo:
            src, dst, st, rel = todo.pop()
            self.order.append(("d", len(self.dirs)))
            self.dirs.append((src, dst, st))
            self._note(b"d", rel, st)
            try:
                with os.scandir(src) as it:
                    entries = sorted(it, key=lambda e: os.fsencode(e.name))
            except OSError as e:
                raise copier.path_error(src, e) from None
            below: list[tuple[str, str, os.stat_result, str]] = []
            for entry in entries:
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError as e:
                    raise copier.path_error(entry.path, e) from None
                path, name = dst.rstrip("/") + "/" + entry.name, rel + "/" + entry.name
                if stat.S_ISDIR(est.st_mode):
                    below.append((entry.path, path, est, name))
                else:
                    self.add(entry.path, path, est, name)
            todo += below[::-1]


def listing(checked: list[Checked]) -> Listing:
    out = Listing()
    for n, (kind, src, dst, st) in enumerate(checked):
        if kind == "directory":
            out.walk(n, src, dst, st)
        else:
            out.order.append(("p", os.path.dirname(dst)))
            out.add(src, dst, st, f"{n}:")
    return out


def _data(st: os.stat_result) -> int:
    return min(st.st_size, st.st_blocks * 512)


def sizes(walk: Listing) -> list[tuple[int, int]]:
    return [(st.st_size, _data(st)) for _, _, st in walk.files]


# -- the three roles ------------------------------------------------------------------------------


def _room(walk: Listing) -> None:
    """The data fits each destination filesystem, counting what a file it replaces frees."""
    room: dict[int, tuple[str, int]] = {}  # filesystem -> (its anchor, bytes free)
    need: dict[int, int] = {}  # filesystem -> bytes the data takes there
    for _, dst, st in walk.files:
        anchor, fd = copier.root_of(dst)
        dev = os.fstat(fd).st_dev
        if dev not in room:
            vfs = os.fstatvfs(fd)
            room[dev], need[dev] = (anchor, vfs.f_bavail * vfs.f_frsize), 0
        need[dev] += _data(st) - copier.replaced_blocks(dst)
    for dev, (anchor, free) in room.items():
        if need[dev] > free:
            raise CopyError(
                f"{anchor}: not enough space for the data to stage ({copier.size_text(free)} free)"
            )


def prepare(checked: list[Checked], count: int, split: int) -> tuple[Listing, list[list[Piece]]]:
    """Make every directory, symlink and split file (at its final size, mode 0600 until
    finish); the walk and the shares."""
    walk = listing(checked)
    _room(walk)
    shares = deal(sizes(walk), count, split)
    cut = {i for share in shares for i, _s, _e, whole in share if not whole}
    for kind, at in walk.order:  # in the single copier's order: a link made by one pair is
        if kind == "p":  # met, never followed, by the next pair's directories
            copier.open_dir(str(at))
        elif kind == "d":
            copier.open_dir(walk.dirs[int(at)][1])
        elif kind == "l":
            copier.make_link(*walk.links[int(at)][:2])
        elif at in cut:
            _src, dst, st = walk.files[int(at)]
            copier.make_sized(dst, st.st_size)
    return walk, shares


def checked_walk(checked: list[Checked], digest: str) -> Listing:
    walk = listing(checked)
    if walk.digest() != digest:
        first = checked[0][1] if checked else "the source"
        raise CopyError(f"{first}: the source changed after the stage was planned")
    return walk


class ShareCopy(copier.Copy):
    """One server's share through the copier's own workers: whole files in batches, each
    range in chunks (so one range still uses every worker)."""

    def share(self, walk: Listing, items: list[Piece]) -> None:
        for i, start, end, whole in items:
            src, dst, st = walk.files[i]
            size = st.st_size
            self.bytes_total += end - start
            self.files_total += 1 if start == 0 else 0
            mode, sparse = stat.S_IMODE(st.st_mode), _data(st) < size
            item = (src, dst, size, mode, st.st_atime_ns, st.st_mtime_ns, sparse)
            if whole:
                self.add(item)
                continue
            self.flush()
            for piece in range(start, end, self.chunk):
                self.workers.send(
                    ("chunk", item + (piece, min(piece + self.chunk, end))), self.on_result
                )
        self.drain()
        self.ended()


def finish(walk: Listing, shares: list[list[Piece]]) -> None:
    """Split files' modes and times, then every directory's, deepest first."""
    split = sorted({i for share in shares for i, _s, _e, whole in share if not whole})
    todo = [(walk.files[i][1], walk.files[i][2], False) for i in split]
    todo += [(dst, st, True) for _src, dst, st in walk.dirs[::-1]]
    for dst, st, directory in todo:
        try:
            copier.set_mode_times(dst, st, directory)
        except OSError as e:
            raise copier.path_error(dst, e) from None


# -- the plan on stdin, the outcome on stdout ---------------------------------------------------


def encode(
    pairs: list[Pair],
    inside: str,
    buffer_side: str,
    workers: int,
    role: str,
    count: int,
    index: int = 0,
    digest: str = "",
    split: int = SPLIT,
    chunk: int = copier.CHUNK,
) -> bytes:
    """A role's plan, NUL-separated as copier.encode_plan's."""
    head = [inside, buffer_side, str(workers), str(chunk), role, str(count), str(index)]
    fields = head + [digest, str(split)]
    for pair in pairs:
        fields += [pair["type"], pair["source"], pair["destination"]]
    if any("\0" in f for f in fields):
        raise ValueError("a path holds a NUL byte")
    return b"\0".join([MAGIC] + [os.fsencode(f) for f in fields])


def decode(data: bytes) -> tuple[list[Pair], str, str, int, int, str, int, int, str, int]:
    """(pairs, inside, buffer_side, workers, chunk, role, count, index, digest, split)."""
    fields = data.split(b"\0")
    if fields[0] != MAGIC or len(fields) < 10 or (len(fields) - 10) % 3:
        raise CopyError("copier failed: stdin holds no share plan")
    f = [os.fsdecode(x) for x in fields]
    if f[5] not in ROLES or not 0 <= int(f[7]) < int(f[6]):
        raise CopyError("copier failed: stdin holds no share plan")
    pairs: list[Pair] = [
        {"type": t, "source": s, "destination": d}
        for t, s, d in zip(f[10::3], f[11::3], f[12::3], strict=False)
    ]
    return pairs, f[1], f[2], int(f[3]), int(f[4]), f[5], int(f[6]), int(f[7]), f[8], int(f[9])


def plan_line(walk: Listing, shares: list[list[Piece]]) -> str:
    """The plan as prepare says it: digest, links made, each share's (bytes, files)."""
    totals = [
        [sum(end - start for _i, start, end, _w in s), sum(1 for _i, st, _e, _w in s if st == 0)]
        for s in shares
    ]
    return (
        f'{{"plan": {{"digest": "{walk.digest()}", "links": {len(walk.links)}, '
        f'"shares": {totals}}}}}\n'
    )


def copy_role(plan: bytes, report: Report) -> None:
    """The share copier's stage, in the copier's `main`: `plan`'s role played."""
    pairs, inside, side, n, chunk, role, count, index, digest, split = decode(plan)
    checked = copier.check(pairs, inside, side)
    if role == "finish":
        walk = checked_walk(checked, digest)
        finish(walk, deal(sizes(walk), count, split))
        return
    if role == "prepare":  # then its own share, from the same walk
        walk, shares = prepare(checked, count, split)
        copier.emit(plan_line(walk, shares))
    else:
        walk = checked_walk(checked, digest)
        shares = deal(sizes(walk), count, split)
    with copier.Workers(n) as workers:
        copy = ShareCopy(workers, report, chunk)
        copier.emit(copier.progress_line(copy, 0, None))
        copy.share(walk, shares[index])


if __name__ == "__main__":
    sys.exit(copier.main(copy_role))
