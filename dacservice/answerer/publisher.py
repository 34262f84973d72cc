"""The pools file, and the files beside it made to follow the mirror (`Publisher`).

The pools file. `slurm_bb_pools` is the one hook whose answer is the same for every caller,
and Slurm calls it every 30 s, so each call finds the answerer idle and cold: the round trip
alone (lua-socket loaded, a process woken) was most of its time inside slurmctld. So the
answerer also keeps the `pools` answer in a file beside its socket (POOLS_FILE, the same
directory, so the same people may read it), which burst_buffer.lua reads instead of asking:
`dac-pools/1 <expires> <exit status> <n>\\n` then dacctl's stdout (n bytes). It is the very
answer the socket would give (built by `answer()` from the mirror), rewritten within
PUBLISH_EVERY of each change of the mirror's content, renewed as each wall-clock second
begins (`renewal`), and removed within PUBLISH_EVERY of the mirror no longer being confirmed
current; `<expires>` (whole seconds of the wall clock, Lua 5.1 has no finer one) bounds how
long a file an answerer stopped or hung left behind is believed: under POOLS_GOOD_FOR + 1 s.
burst_buffer.lua asks the socket when the file is missing, expired, or dated in the future (a
clock set back).

The paths files (published.py): beside it, `paths/<job id>` holds each job buffer's `paths`
answer, made to follow the mirror just before each pools file is written, so a pools file
believed vouches for them; burst_buffer.lua reads the job's at its start instead of asking.
The valid files (published.py), likewise: each job_process answer kept as valid (answers.py,
VALID_KEPT) for the mirror's content now is in `valid/<name>` (the request's words and
script), all removed when that content or the config moves; burst_buffer.lua answers a
request one holds whole without asking.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
from typing import TYPE_CHECKING

from dacservice.answerer.published import PathsFiles, ValidFiles, replace

if TYPE_CHECKING:
    import threading

    from dacservice.answerer.answers import Answerer
    from dacservice.answerer.mirror import Mirror

__all__ = [
    "Publisher",
    "pools_expiry",
    "renewal",
    "POOLS_FILE",
    "POOLS_MAGIC",
    "POOLS_GOOD_FOR",
    "RENEW_EVERY",
    "PUBLISH_EVERY",
]

log = logging.getLogger(__name__)

#: the pools file, beside the socket (module docstring)
POOLS_FILE = "pools"
POOLS_MAGIC = b"dac-pools/1"
#: whole seconds of the wall clock, past the second it was written in, that the pools file is
#: believed by burst_buffer.lua; rewritten at the start of each wall-clock second while the
#: mirror is current (`renewal`)
POOLS_GOOD_FOR = 1
RENEW_EVERY = 1.0
#: seconds between two looks at the mirror by the pools file's writer
PUBLISH_EVERY = 0.1


def pools_expiry(now: float) -> int:
    """The `<expires>` of a pools file written at `now`: burst_buffer.lua believes it while the
    wall clock's whole seconds are below it (pools_file), so for POOLS_GOOD_FOR whole seconds
    past the one it was written in."""
    return int(now) + POOLS_GOOD_FOR + 1


def renewal(now: float) -> float:
    """When a pools file written at `now` is written again: at the start of the next wall-clock
    second, not RENEW_EVERY after `now`. Renewed every second from whenever it was written, a
    file written late in a second expired before its renewal came (the writer looks every
    PUBLISH_EVERY): for up to PUBLISH_EVERY every few seconds, each hook asked the socket. On the
    second's boundary the file written is believed POOLS_GOOD_FOR whole seconds longer than the
    writer waits, whatever the fraction."""
    return float(int(now)) + RENEW_EVERY


class Publisher:
    """The pools file, the paths files and the valid files of `answerer` in `directory`, the
    socket's (its group and mode theirs); `run` keeps them until it is told to stop."""

    def __init__(self, answerer: Answerer, directory: str):
        self.answerer = answerer
        self.pools_path = os.path.join(directory, POOLS_FILE)
        st = os.stat(directory)  # the socket's listener made it ours, and set its group and mode
        self._group = st.st_gid
        self.paths_files = PathsFiles(directory, st.st_gid, st.st_mode & 0o777)
        self.valid_files = ValidFiles(
            directory,
            st.st_gid,
            st.st_mode & 0o777,
            _file_owner(answerer.settings["slurm_user"]),
        )
        self._published: tuple[object, ...] | None = None  # what the pools file holds
        self._renew_at = 0.0
        self._valid_synced: object = None

    def run(self, stopped: threading.Event) -> None:
        """Every PUBLISH_EVERY, until `stopped` is set."""
        while not stopped.wait(PUBLISH_EVERY):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - the file goes; the hook asks the socket
                log.exception("writing %s failed", self.pools_path)
                self._unpublish()

    def publish(self, now: float | None = None) -> None:
        """The pools file made to hold what the socket would answer now, or removed when the
        mirror is not confirmed current (module docstring); the paths files
        (dacservice/answerer/published.py) made to follow the mirror first, so that a pools
        file believed vouches for them too."""
        answerer = self.answerer
        mirror = answerer.mirror
        if mirror is None or not mirror.fresh():
            self._unpublish()
            return
        now = time.time() if now is None else now
        what = (mirror, mirror.changes, answerer.identity)
        if what == self._published and now < self._renew_at:
            self._sync_valid(mirror)  # answers kept since
            return
        source, result = answerer.answer("pools", [])
        if source != "mirror" or isinstance(result, str):
            self._unpublish()  # refused, or etcd's answer: not the mirror's, so not kept
            return
        if what != self._published:  # the mirror's content or the config moved
            n = self.paths_files.update(mirror, answerer.settings["mount_root"])
            if n:
                answerer.count("paths:files", n)
        self._sync_valid(mirror)
        rc, out, _ = result
        body = out.encode("utf-8", "surrogateescape")
        expires = pools_expiry(now)
        head = b"%s %d %d %d\n" % (POOLS_MAGIC, expires, rc, len(body))
        replace(self.pools_path, head + body, self._group)
        self._published, self._renew_at = what, renewal(now)
        answerer.count("pools:file")

    def _sync_valid(self, mirror: Mirror) -> None:
        """The valid files (published.py) made to hold the answers kept for the mirror's
        content and the config as they are now: the others removed."""
        kept = self.answerer.valid_kept(mirror, self._valid_synced)
        if kept is None:
            return
        synced, entries = kept
        n = self.valid_files.sync(synced[:3], entries)
        self._valid_synced = synced
        if n:
            self.answerer.count("valid:files", n)

    def _unpublish(self) -> None:
        if self._published is not None or os.path.lexists(self.pools_path):
            try:
                os.unlink(self.pools_path)
            except FileNotFoundError:
                pass
            self._published = None

    def clear(self) -> None:
        """Every file gone: the answerer stops."""
        try:
            os.unlink(self.pools_path)
        except OSError:
            pass
        self.paths_files.clear()
        self.valid_files.clear()


def _file_owner(slurm_user: str | None) -> int:
    """Whose the valid files are (they hold users' scripts): SlurmUser's, when this process is
    root and SlurmUser is another account; else -1, this process's own."""
    if os.geteuid() != 0 or not slurm_user:
        return -1
    try:
        uid = pwd.getpwnam(slurm_user).pw_uid
    except KeyError:
        return -1
    return uid if uid != 0 else -1
