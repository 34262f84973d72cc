"""Who may call Slurm's functions (`dacctl --function`, the answerer), and the checks on every
argument Slurm passes them.

Only Slurm runs these functions: root or the config's `slurm_user` (SlurmUser). Even then every
argument is checked before use, since a path or token that reached here by some other route
must not make root write or read where it should not (docs/security.md, "Entry points").

Where Slurm puts its files (burst_buffer/datawarp and burst_buffer/lua, 22.05 to master):
`<StateSaveLocation>/hash.<id % 10>/job.<id>/{script,path,pathfile,client_nids}`, for a job
array's job_process the array's `job.<array id>/script`, for a teardown without a script
`<StateSaveLocation>/burst_buffer_script`, and for a script with `%` symbols a memfd of
slurmctld's, `/proc/<pid>/fd/<n>`. StateSaveLocation belongs to SlurmUser, mode 0700/0755, so
a path is accepted only when every directory on the way belongs to root or SlurmUser and none
a user can write to (a sticky one such as /tmp only above the last), reached without following
a link; the file itself is opened relative to its directory with O_NOFOLLOW.

A job array's tasks: once a task's job_process succeeds, Slurm hard-links the array's script
to the task's `job.<task id>/script` (bb_p_job_validate2, both plugins, 22.05 to master), so
a script may have more than one name. Every name of it lies in a directory only root or
SlurmUser can write to (a hard link is made in a directory one can write to, and every
directory on our way is checked), and a file read must be writable by its owner alone, so no
other name lets anyone change what is read. A file written (the path file) must still have
one name. From 24.11 Slurm runs that job_process for the array's remaining record instead of
the task it split off (job_scheduler.c, `_split_job_on_schedule_recurse`), so the task's job
directory is never made, yet its hooks are handed `job.<task id>/script` and `path`:
`link_task_script` makes the link Slurm meant to, from the array's script, and `open_write`
the task's job directory for its path file (docs/security.md).

Imports only the standard library: job_process and paths run inside slurmctld.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable  # not typing's: typing costs the hooks ~3 ms to import

__all__ = [
    "Refused",
    "Missing",
    "require_slurm",
    "job_id",
    "token",
    "owner_id",
    "capacity",
    "open_read",
    "open_write",
    "link_task_script",
]

#: A job id as Slurm prints one (uint32): decimal, bounded.
JOB_ID = re.compile(r"[1-9][0-9]{0,9}")  # fullmatch: "$" would let a newline through
_MEMFD = re.compile(r"/proc/([1-9][0-9]{0,9})/fd/([0-9]{1,9})")
_JOB_FILE = re.compile(r"/hash\.([0-9])/job\.([1-9][0-9]{0,9})/([a-z_]+)\Z")


class Refused(Exception):
    """One line for whoever called: the argument, and why it was refused."""


class Missing(Refused):
    """The file, or a directory on its way, does not exist."""


def require_slurm(slurm_user: str | None) -> frozenset[int]:
    """The uids trusted with Slurm's files (root and SlurmUser); Refused unless the caller is
    one of them. `slurm_user` None: the config could not be read, so only root passes."""
    uid = os.getuid()
    trusted = {0}
    if slurm_user:
        import pwd

        try:
            trusted.add(pwd.getpwnam(slurm_user).pw_uid)
        except KeyError:
            pass
    if uid not in trusted or os.geteuid() not in trusted:
        raise Refused(
            "dacctl --function is for Slurm only (root or SlurmUser "
            f"'{slurm_user or 'root'}'); see your buffers with `dacctl status <job>`"
        )
    return frozenset(trusted)


def job_id(value: str, what: str = "--token") -> str:
    if not JOB_ID.fullmatch(value):
        raise Refused(f"{what} {value!r}: not a job id (Slurm passes decimal job ids)")
    return value


def token(value: str, persistent_ok: bool) -> str:
    """A job id, or where Slurm may pass one (create_persistent, a persistent buffer's
    teardown), a persistent buffer's name."""
    if JOB_ID.fullmatch(value):
        return value
    if persistent_ok:
        from daccore.rules.directives import PERSISTENT_NAME

        if PERSISTENT_NAME.fullmatch(value):
            return value
        raise Refused(f"--token {value!r}: neither a job id nor a persistent buffer's name")
    raise Refused(f"--token {value!r}: not a job id (Slurm passes decimal job ids)")


def owner_id(value: int, what: str, minimum: int) -> int:
    """A uid or gid a buffer may belong to: at or above the config's min_owner_uid."""
    if value < 0 or value > 0xFFFFFFFE or value < minimum:
        raise Refused(
            f"{what} {value} is below min_owner_uid {minimum}: dac makes no buffer for that account"
        )
    return value


def capacity(value: str) -> tuple[str, int]:
    """(pool, bytes) of setup's `--capacity POOL:SIZE`: burst_buffer/datawarp's size as
    bb_get_size_str prints it (`600MiB`, or bytes), burst_buffer.lua's in bytes. A job that
    accounts nothing passes size 0 (and, under lua, pool `(null)`)."""
    from daccore.units import parse_capacity

    pool, sep, size = value.rpartition(":")
    if not sep:
        raise Refused(f"--capacity {value!r}: not POOL:SIZE, as Slurm passes it")
    try:
        return pool, parse_capacity(size)
    except ValueError as e:
        raise Refused(f"--capacity {value!r}: size {size!r} {e}") from None


def open_read(
    path: str,
    what: str,
    trusted: frozenset[int],
    token: str | None = None,
    names: tuple[str, ...] = (),
) -> int:
    """A read-only fd of a file Slurm wrote for us (the job script, the node list)."""
    m = _MEMFD.fullmatch(path)
    if m:  # slurmctld's memfd: a magic link, which only its own process may hand out
        try:
            owner = os.stat(f"/proc/{m.group(1)}").st_uid
        except OSError:
            raise Refused(f"{what} {path}: no such process") from None
        if owner not in trusted:
            raise Refused(f"{what} {path}: not a process of root or SlurmUser")
        fd = _open(path, os.O_RDONLY | os.O_CLOEXEC, what)
        _check_file(fd, path, what, trusted, memfd=True)
        return fd
    check_name(path, what, token, names)
    parent, name = _parent(path, what, trusted)
    try:
        fd = _open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, what, parent, path
        )
    finally:
        os.close(parent)
    _check_file(fd, path, what, trusted, links_ok=True)
    return fd


def link_task_script(
    path: str, token: str, array_job: Callable[[], str | None], trusted: frozenset[int]
) -> int:
    """A read-only fd of job array task `token`'s script at `path`, Slurm's
    `<state>/hash.<token % 10>/job.<token>/script`, once linked from the array's own
    `job.<array_job()>/script` as Slurm 22.05 links it (the module's docstring says why 24.11+
    does not): the task's job directory made (0700, owned as its hash directory is, as Slurm
    makes it) and the very file checked linked in through its descriptor, never by a name
    that could change in between. Missing unless `path` is that task's script and
    `array_job()` names the array, another job."""
    m = _JOB_FILE.search(path)
    missing = Missing(f"cannot read the job script {path}: No such file or directory")
    if m is None or m.group(2) != token or m.group(3) != "script":
        raise missing
    array = array_job()
    if array is None or array == token or not JOB_ID.fullmatch(array):
        raise missing
    state = path[: m.start()]
    source = open_read(
        f"{state}/hash.{int(array) % 10}/job.{array}/script",
        "the job array's script",
        trusted,
        array,
        ("script",),
    )
    try:
        _make_job_dir(path, "the job script", trusted)
        task_dir, name = _parent(path, "the job script", trusted)
        try:
            # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N links the open file itself
            os.link(f"/proc/self/fd/{source}", name, dst_dir_fd=task_dir)
        except FileExistsError:
            pass  # made meanwhile (a second call for the task, or Slurm): checked below
        except OSError as e:
            raise Refused(f"cannot link the job array's script to {path}: {e.strerror}") from None
        finally:
            os.close(task_dir)
    finally:
        os.close(source)
    return open_read(path, "the job script", trusted, token, ("script",))


def open_write(
    path: str, what: str, trusted: frozenset[int], token: str, names: tuple[str, ...]
) -> int:
    """A write fd of the file Slurm asked us to fill (the path file), created or emptied
    inside Slurm's own job directory, never through a link."""
    check_name(path, what, token, names)
    try:
        parent, name = _parent(path, what, trusted)
    except Missing:
        if _JOB_FILE.search(path) is None:
            raise
        _make_job_dir(path, what, trusted)  # a job array's task on 24.11+ (module docstring)
        parent, name = _parent(path, what, trusted)
    try:
        fd = _open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            what,
            parent,
            path,
            0o644,
        )
    finally:
        os.close(parent)
    checked = _check_file(fd, path, what, trusted, links_ok=False)
    # only once it is known to be Slurm's own regular file; Slurm hands paths an empty one,
    # and emptying that again costs ext4's flush at close (auto_da_alloc): 0.04-0.07 ms a call
    if checked.st_size:
        os.ftruncate(fd, 0)
    return fd


def _make_job_dir(path: str, what: str, trusted: frozenset[int]) -> None:
    """The job directory of `path` (checked by check_name to be this job's, in Slurm's
    layout), made in its hash directory as Slurm makes it: 0700, owned as the hash directory
    is. Slurm removes it with the job's files when the job is purged."""
    hash_dir, job_dir = _parent(path.rsplit("/", 1)[0], what, trusted)
    try:
        os.mkdir(job_dir, 0o700, dir_fd=hash_dir)
        if os.geteuid() == 0:
            st = os.fstat(hash_dir)
            os.chown(job_dir, st.st_uid, st.st_gid, dir_fd=hash_dir, follow_symlinks=False)
    except FileExistsError:
        pass
    finally:
        os.close(hash_dir)


def check_name(path: str, what: str, token: str | None, names: tuple[str, ...]) -> None:
    """A path in Slurm's layout must be the file Slurm uses for this job. Other places (a
    site's own wrapper, the test suite) pass on the trusted-directory rule alone."""
    m = _JOB_FILE.search(path)
    if m is None:
        return
    hash_, job, name = m.groups()
    if int(job) % 10 != int(hash_) or name not in names or (token is not None and job != token):
        raise Refused(
            f"{what} {path}: not this job's {' or '.join(names)} in Slurm's job directories"
        )


def _parent(path: str, what: str, trusted: frozenset[int]) -> tuple[int, str]:
    """An O_PATH fd of `path`'s directory, reached from / one component at a time without
    following links, each directory owned by root or SlurmUser and, but for the last, either
    unwritable by others or sticky; the last must be writable by nobody else at all."""
    parts = path.split("/")
    if not path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts[1:]):
        raise Refused(f"{what} {path!r} must be an absolute path without '.', '..' or '//'")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[1:-1]:
            st = os.fstat(fd)
            _trusted_dir(st, path, what, trusted, last=False)
            nfd = _open(
                name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, what, fd, path
            )
            os.close(fd)
            fd = nfd
        _trusted_dir(os.fstat(fd), path, what, trusted, last=True)
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _trusted_dir(
    st: os.stat_result, path: str, what: str, trusted: frozenset[int], last: bool
) -> None:
    writable = st.st_mode & 0o022
    if st.st_uid not in trusted or (writable and (last or not st.st_mode & stat.S_ISVTX)):
        raise Refused(
            f"{what} {path}: a directory on the way is not root's or SlurmUser's "
            "alone, so another user could change it"
        )


def _open(
    name: str, flags: int, what: str, dir_fd: int | None = None, path: str = "", mode: int = 0o600
) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as e:
        import errno

        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{what} {path or name}: a symbolic link on the way, refused") from None
        verb = "write" if flags & os.O_WRONLY else "read"
        error = Missing if e.errno == errno.ENOENT else Refused
        raise error(f"cannot {verb} {what} {path or name}: {e.strerror}") from None


def _check_file(
    fd: int,
    path: str,
    what: str,
    trusted: frozenset[int],
    links_ok: bool = False,
    memfd: bool = False,
) -> os.stat_result:
    """A regular file of root's or SlurmUser's, which no one else can write to (a memfd only
    its process can reach: its mode says nothing); one with several names (a job array's
    script, linked by Slurm) only where `links_ok`. Its stat, checked."""
    st = os.fstat(fd)
    why = (
        "not a regular file"
        if not stat.S_ISREG(st.st_mode)
        else f"owned by uid {st.st_uid}, not root or SlurmUser"
        if st.st_uid not in trusted
        else f"writable by others (mode {st.st_mode & 0o7777:04o})"
        if st.st_mode & 0o022 and not memfd
        else f"has {st.st_nlink} names (hard links), so root writes to no file of this name"
        if st.st_nlink > 1 and not links_ok
        else ""
    )
    if why:
        os.close(fd)
        raise Refused(f"{what} {path}: {why}")
    return st
