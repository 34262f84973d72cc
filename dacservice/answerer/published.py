"""What the answerer keeps in files beside its socket for burst_buffer.lua to read instead of
asking (publisher.py): each file replaced whole (`replace`), in the socket's own directory, so
the same people may read it as may reach the socket. The pools file is publisher.py's own
(`Publisher.publish`); the paths files and the valid files (`ValidFiles`, job_process's kept
answers) are this module's.

The paths files. `slurm_bb_paths` runs under slurmctld's job lock as each job starts, in the
same moments as the other jobs' starts, their forked `pre_run`s and dacd's playbooks: a round
trip to the answerer is a process woken on a busy machine (docs/performance.md). Yet the
answer for a job with a buffer never needs the caller: it is its spec's `request.access` and
`request.persistent` under the config's mount root (daccore/services/slurm_functions.py,
`buffer_paths`), set
when the buffer is made. So for every key `buffers/<job id>` the mirror holds, the answerer
keeps `paths/<job id>`: `dac-paths/1 <n>\\n` then the path file's n bytes, the very text
`dacctl --function paths` writes, rewritten when the spec or the config changes and removed
with it, within PUBLISH_EVERY of the mirror. burst_buffer.lua believes one only while the
pools file is believed (the mirror confirmed current within the last 1-2 s), and asks the
socket otherwise, or when there is no file (a job without a buffer: its persistentdw names are
in its script). A spec that is not what `paths` reads (not JSON, no `request.access` string,
no list of names) gets no file: asked, it gets the fork's own answer. A new answerer removes
what one before it left.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from typing import TYPE_CHECKING

from daccore.records.keys import prefix_end
from daccore.services.slurm_functions import buffer_paths

if TYPE_CHECKING:
    from dacservice.answerer.mirror import Mirror

__all__ = [
    "PathsFiles",
    "ValidFiles",
    "replace",
    "valid_name",
    "PATHS_DIRECTORY",
    "PATHS_MAGIC",
    "VALID_DIRECTORY",
    "VALID_MAGIC",
]


PATHS_DIRECTORY = "paths"
PATHS_MAGIC = b"dac-paths/1"
#: a job id: what burst_buffer.lua looks up (Slurm's uint32)
_MAX_JOB_DIGITS = 10

VALID_DIRECTORY = "valid"
VALID_MAGIC = b"dac-valid/1"
#: the largest prime under 2**32: `valid_name`'s modulus (exact in Lua 5.1's doubles)
_P = 4294967291
#: bytes of a script `valid_name` samples, evenly spaced: the name costs Lua the same for any
#: script; the file holds the whole script, compared whole, so names that collide cost a
#: round trip, never a wrong answer
_SAMPLES = 64


def replace(path: str, data: bytes, group: int, owner: int = -1, mode: int = 0o640) -> None:
    """`path` (in the answerer's own directory) replaced whole by `data`, `mode` (0640) with
    the directory's group (and `owner`, when not -1): a reader sees the old file or the new,
    never a part."""
    tmp = path + ".new"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_gid != group or owner not in (-1, st.st_uid):
            os.fchown(fd, owner, group)
        os.fchmod(fd, mode)  # whatever the umask
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _removed(path: str) -> None:
    """`path` (the answerer's own, in its own directory) gone, whatever it was."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _made_anew(path: str, group: int, mode: int) -> None:
    """`path` an empty directory with `group` and `mode`: what an answerer before this one
    left there removed first."""
    _removed(path)
    os.mkdir(path, mode)
    os.chown(path, -1, group)
    os.chmod(path, mode)  # whatever the umask


def _is_job(name: str) -> bool:
    return 0 < len(name) <= _MAX_JOB_DIGITS and name.isascii() and name.isdigit()


def paths_file(job: str, value: bytes, mount_root: str) -> bytes | None:
    """The paths file of job `job` whose spec is `value` (etcd's bytes), None when the spec is
    not what `paths` reads (module docstring)."""
    try:
        doc = json.loads(value)
        request = doc["request"]
        access, persistent = request["access"], request["persistent"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(access, str) or not isinstance(persistent, list):
        return None
    if not all(isinstance(p, str) for p in persistent):
        return None
    try:
        body = buffer_paths(job, doc, mount_root).encode()
    except UnicodeEncodeError:
        return None
    return b"%s %d\n" % (PATHS_MAGIC, len(body)) + body


class PathsFiles:
    """The paths files of one answerer, in `directory`/PATHS_DIRECTORY (module docstring)."""

    def __init__(self, directory: str, group: int, mode: int):
        self.path = os.path.join(directory, PATHS_DIRECTORY)
        self._group = group
        #: job -> (the spec's mod_revision, the file's bytes) of every file written
        self._written: dict[str, tuple[int, bytes]] = {}
        self._built_for: tuple[Mirror, str] | None = None
        _made_anew(self.path, group, mode)

    def clear(self) -> None:
        """No paths file left (at the close)."""
        _removed(self.path)
        self._written, self._built_for = {}, None

    def update(self, mirror: Mirror, mount_root: str) -> int:
        """The files made to hold what the mirror's buffer specs say now; how many were
        written or removed. Only specs whose revision moved are read again, unless the
        mirror or the mount root are not those the files were built for."""
        prefix = mirror.keys.buffers
        with mirror.lock:
            kvs, _ = mirror.read(prefix, prefix_end(prefix), False, 0)
        again = self._built_for != (mirror, mount_root)
        seen: set[str] = set()
        done = 0
        for kv in kvs:
            job = kv.key[len(prefix) :]
            if not _is_job(job):
                continue
            seen.add(job)
            old = self._written.get(job)
            if old is not None and old[0] == kv.mod_revision and not again:
                continue
            data = paths_file(job, kv.value, mount_root)
            if data is None:
                done += self._remove(job)
            elif old is None or old[1] != data:
                replace(os.path.join(self.path, job), data, self._group)
                self._written[job] = (kv.mod_revision, data)
                done += 1
            else:
                self._written[job] = (kv.mod_revision, data)
        for job in set(self._written) - seen:
            done += self._remove(job)
        self._built_for = (mirror, mount_root)
        return done

    def _remove(self, job: str) -> int:
        if self._written.pop(job, None) is None:
            return 0
        try:
            os.unlink(os.path.join(self.path, job))
        except FileNotFoundError:
            pass
        return 1


def valid_name(words: str, script: bytes) -> str:
    """The valid file's name of a job_process request: its words but --job's (`--user U`, or
    none) and its script, sampled (_SAMPLES). burst_buffer.lua's `valid_name` computes the
    same: a test holds them to it."""
    h = 0
    for b in words.encode():
        h = (h * 31 + b) % _P
    n = len(script)
    h = (h * 31 + n) % _P
    for i in range(0, n, max(1, n // _SAMPLES)):
        h = (h * 31 + script[i]) % _P
    return "%08x" % h


class ValidFiles:
    """The valid files: the job_process answers the answerer keeps as valid (answers.py,
    VALID_KEPT), each in `valid/<valid_name>`: `dac-valid/1 <w> <n>\\n`, the request's words
    (w bytes) and its script (n bytes). burst_buffer.lua reads the one its request would be
    named by, believed only while the pools file is, and answers success without asking when
    it holds the very words and script; otherwise it asks. `sync` makes the files hold what
    the memo holds for the mirror's content now: every file goes when that content (or the
    config) moves, within PUBLISH_EVERY; each file is 0600, SlurmUser's (a user's script)."""

    def __init__(self, directory: str, group: int, mode: int, owner: int):
        self.path = os.path.join(directory, VALID_DIRECTORY)
        self._group, self._owner = group, owner
        self._written: dict[str, tuple[str, bytes]] = {}  # name -> (words, script)
        self._stamp: object = None
        _made_anew(self.path, group, mode)

    def clear(self) -> None:
        """No valid file left (at the close)."""
        _removed(self.path)
        self._written, self._stamp = {}, None

    def sync(self, stamp: object, entries: list[tuple[str, bytes]]) -> int:
        """The files made to hold `entries` ((words, script) valid for `stamp`, what they were
        kept against); how many were written or removed."""
        done = 0
        if stamp != self._stamp:
            for name in list(self._written):
                done += self._remove(name)
            self._stamp = stamp
        wanted = {valid_name(w, s): (w, s) for w, s in entries}
        for name in [n for n in self._written if n not in wanted]:
            done += self._remove(name)
        for name, (words, script) in wanted.items():
            if self._written.get(name) == (words, script):
                continue
            w = words.encode()
            head = b"%s %d %d\n" % (VALID_MAGIC, len(w), len(script))
            path = os.path.join(self.path, name)
            replace(path, head + w + script, self._group, self._owner, 0o600)
            self._written[name] = (words, script)
            done += 1
        return done

    def _remove(self, name: str) -> int:
        self._written.pop(name, None)
        try:
            os.unlink(os.path.join(self.path, name))
        except FileNotFoundError:
            pass
        return 1
