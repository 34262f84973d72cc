"""The tree the split-copy tests stage (tests/system/test_copy_share.py in-process,
tests/system/test_split_across.py across the local DAC's dacds), and what a copy made of it:
directories, small and big files, a sparse one, an empty one, a link, times set; every entry
owned by the job's user (UID:GID, or an `Owner`'s), as a stage's source is;
tests/multihost/test_split_across.py uses it too."""

import os
from pathlib import Path
from types import SimpleNamespace

from daccore.records.models import StageType

UID, GID = 1234, 4321
MiB = 1 << 20


class Owner:
    """Trees owned by one user: the local DAC's tests use UID:GID, the multi-host site's a user
    its hosts know (1001)."""

    def __init__(self, uid: int, gid: int):
        self.uid, self.gid = uid, gid

    def owned(self, path, mode=0o755):
        os.makedirs(path, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
        return path

    def write(self, path, data, mode=0o640, times=None):
        Path(path).write_bytes(data)
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
        if times:
            os.utime(path, ns=times)

    def tree(self, src, dirs=3, files=150, step=13, big=5 * MiB + 777, sparse=(3, 40, 64)):
        """`dirs` directories of `files` files (file f of f * `step` bytes, modes alternating),
        a `big` file with times set, a sparse one (`sparse`: MiB of data at 0 and again at
        the second figure, the third its apparent size), an empty one, a link, times set."""
        data, hole, apparent = sparse
        self.owned(src)
        for d in range(dirs):
            self.owned(src / f"d{d}", 0o750)
            for f in range(files):
                self.write(src / f"d{d}" / f"f{f}", os.urandom(f * step), 0o600 + (f % 2) * 0o44)
        self.write(src / "big", os.urandom(big), 0o604, (1_000_000_000, 2_000_000_000))
        with open(src / "sparse", "wb") as out:
            out.write(os.urandom(data * MiB))
            out.seek(hole * MiB)
            out.write(os.urandom(data * MiB))
            out.truncate(apparent * MiB)
        os.chown(src / "sparse", self.uid, self.gid)
        self.write(src / "empty", b"")
        os.symlink("/etc/shadow", src / "link")
        os.lchown(src / "link", self.uid, self.gid)
        os.utime(src / "d1", ns=(5_000_000_000, 6_000_000_000))

    def buffer_for(self, src):
        """A buffer of this owner's whose one stage_in line copies `src` to striped/in."""
        line = SimpleNamespace(
            type=StageType.DIRECTORY, source=str(src), destination="$DW_JOB_STRIPED/in"
        )
        return SimpleNamespace(
            owner_uid=self.uid,
            owner_gid=self.gid,
            request=SimpleNamespace(stage_in=[line], stage_out=[]),
        )

    def fs_root(self, path):
        self.owned(path, 0o755)
        self.owned(path / "striped", 0o700)
        return path


_USER = Owner(UID, GID)
owned, write, tree, buffer_for, fs_root = (
    _USER.owned,
    _USER.write,
    _USER.tree,
    _USER.buffer_for,
    _USER.fs_root,
)


def seen(root):
    """Every entry below `root`: kind, mode, owner, mtime (a link's is when it was made, by
    either copy), and its bytes or link target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            what = (
                os.readlink(p)
                if os.path.islink(p)
                else Path(p).read_bytes()
                if os.path.isfile(p)
                else None
            )
            mtime = None if os.path.islink(p) else st.st_mtime_ns
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_uid, st.st_gid, mtime, what)
    return out
