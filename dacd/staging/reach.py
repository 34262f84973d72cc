"""Which servers a split stage (issue 35) may be shared with, and the proof each of them sees
the primary's filesystem before it copies a byte of its share.

Two checks, one cheap and one sure. Choosing owners: each dacd says its view (`view`, kept at
`stage-views/<host>`) and each backend its rule (`split_reach`); the primary shares a stage
with the live servers its rule says reach it (`reaches`). Before copying: the primary makes a
file named for the plan's random proof at the top of its fs_path (`make_proof`), as root, in a
directory no user may write; a server copies its shares only where it finds that file at its
own fs_path (`proves`). A server that does not see the primary's filesystem (a Lustre client
not mounted there, a mount point left empty) would otherwise copy a share into its own empty
mount point and lose it: it says so in its report (`unreached`), and the primary gives its
shares to the others."""

from __future__ import annotations

import errno
import os
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daccore.backends import Backend

__all__ = ["drop_proof", "make_proof", "proves", "reaches", "split_reach", "view"]

#: the proof file's name at the top of fs_path, the plan's proof appended
PROOF_PREFIX = ".dac-split-"


def view() -> str:
    """Which mount namespace this dacd sees filesystems in: the boot's id and the namespace's
    inode. Two dacds with the same view see one tree (the local DAC's servers)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{boot}:{os.readlink('/proc/self/ns/mnt')}"


def split_reach(backend: Backend | type[Backend]) -> str:
    """A backend's rule for which servers a stage is split across (`reaches`): its own
    `split_reach`, else "namespace" for a backend whose servers each run their own steps
    (local) and "none" for one whose primary runs every step (daos)."""
    default = "none" if backend.one_run_for_all_hosts else "namespace"
    return str(getattr(backend, "split_reach", default))


def reaches(mine: str, theirs: str | None, reach: str) -> bool:
    """Whether a server whose dacd said view `theirs` (None: a dacd that does not split)
    reaches the filesystem a primary of view `mine` stages into, by the backend's rule.
    "namespace" (local): the filesystem is a mount on the primary, seen only from the same
    mount namespace of the same boot. "client" (lustre): the buffer's client, which the
    create playbook mounts at fs_path on every server of the buffer. "none" (daos: the
    staging mount is the user's own dfuse, where a proof would prove nothing against the
    user; docs/architecture.md): never.
    Either way, the proof decides at copy time."""
    if theirs is None or reach == "none":
        return False
    if reach == "client":
        return True
    return theirs == mine


def _top(fs_path: str) -> int:
    """The top of fs_path: a mount point in `fs_root`, a tree of root's that no user may write
    (docs/security.md), so its name is resolved as is (the multi-host site's Lustre stand-in
    makes a mounted client's mount point a link into the filesystem's store); below it, no
    name is followed."""
    return os.open(fs_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def make_proof(fs_path: str) -> str:
    """A new proof: its file made at the top of fs_path, root's and 0600, never through a link
    (O_EXCL: a name already there is an error, not reused). The top is root's in every backend
    (the job's directories below it are the users'), so no user can make or change it."""
    proof = secrets.token_hex(16)
    top = _top(fs_path)
    try:
        fd = os.open(
            PROOF_PREFIX + proof,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=top,
        )
        os.close(fd)
    finally:
        os.close(top)
    return proof


def proves(fs_path: str, proof: str) -> bool:
    """Whether this host sees the primary's filesystem at fs_path: the proof's file is there,
    a regular file of root's. An empty proof (a plan recorded before proofs) proves nothing
    and is taken as found, as those plans were copied."""
    if not proof:
        return True
    try:
        top = _top(fs_path)
    except OSError:
        return False
    try:
        st = os.stat(PROOF_PREFIX + proof, dir_fd=top, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(top)
    return st.st_uid == 0 and (st.st_mode & 0o170000) == 0o100000


def drop_proof(fs_path: str, proof: str) -> None:
    """The proof's file removed once its stage has ended (gone already: nothing to do)."""
    if not proof:
        return
    try:
        top = _top(fs_path)
    except OSError:
        return
    try:
        os.unlink(PROOF_PREFIX + proof, dir_fd=top)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
    finally:
        os.close(top)
