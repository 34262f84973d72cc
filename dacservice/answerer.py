"""dac's answerer: the three hooks slurmctld runs synchronously, under its job lock
(`slurm_bb_job_process`, `slurm_bb_pools`, `slurm_bb_paths`), answered by a warm process
instead of a forked `dacctl --function`, over a unix socket burst_buffer.lua reaches
in-process (lua-socket). Slurm's real_size, in every release, runs in slurmscriptd: not here.
Also `scontrol show bbstat` and `dwstat` (`bbstat`, issue 45), which any user may loop and
slurmctld runs under its burst-buffer lock, every submission waiting: dac-bbstat's text
(daccore/services/bbstat.py) without a Python started per call.

The answers are dacctl's own: each request runs `daccore.services.slurm_answer.answer`, the
very code of `dacctl --function`, for the functions the command table marks `hot`
(daccore/services/command_table.py), with the config this process keeps (reloaded when the
file changes) and a store that reads the in-memory mirror of etcd (mirror.py) while the mirror
is confirmed current, etcd itself (bounded by DIRECT_TIMEOUT) otherwise or where the mirror is
unsure. When neither can answer for sure, the answerer refuses, and burst_buffer.lua forks
`dacctl --function` with what is left of its 2 s: Slurm never loses a hook.

Wire protocol, one request per connection. Request: one line, `dac-answer/1 <function>
<arg>...`, each word percent-encoded (every byte but letters, digits and `-._/:=,` as %XX).
`dac-answer/2` is /1 with one word more after the function (MAGIC_CARRYING; an answerer of
/1 alone refuses it, and the hook forks dacctl, so a burst_buffer.lua newer than the running
answerer loses nothing). `job_process` may carry its job script: `dac-answer/2 job_process
script:<n> <arg>...`, the line then the script's n bytes (at most MAX_SCRIPT), as the caller
read them from --job's path; the answer is built from them and no file is opened
(burst_buffer.lua reads the file itself: slurmctld's own, in its StateSaveLocation), and a
valid answer can be kept by those bytes (VALID_KEPT). `paths` may ask for its path file's
lines in the reply instead of written: `dac-answer/2 paths reply:pathfile <arg>...`
(--pathfile's name is still checked to be Slurm's for the job; burst_buffer.lua writes the
lines into slurmctld's own file, and asks again without it when it cannot).
`bbstat` (issue 45) answers what `dac-bbstat` prints for `scontrol show bbstat` and `scontrol
show dwstat`, with the word after the function naming the caller as Slurm named it:
`dac-answer/2 bbstat caller:<uid>:<gid> <word>...` (burst_buffer.lua on Slurm 23.02+), or
`caller:` alone where Slurm names no one (22.05, burst_buffer/datawarp's forwarder); the
words are the user's, as dac-bbstat would get them (an empty one sent as `%00`: a line cannot
carry an empty last word, and no argv word holds a NUL). The reply is dac-bbstat's stdout,
exit 0, byte for byte (daccore/services/bbstat.py `answer`); a `dac-answer/1 bbstat` is refused,
as an answerer older than bbstat refuses both, and the caller forks dac-bbstat. The caller's uid
is believed as DAC_BBSTAT_CALLER is: only root and SlurmUser may ask (below), and slurmctld
names it.
Reply, then the close:
  `ANSWER <exit status> <n>\\n` then dacctl's stdout (n bytes), then its stderr;
  `REFUSE <reason>\\n`: the caller forks dacctl.
`dac-answer/1 stats` answers `ANSWER 0 <n>\\n` and a JSON object of counters.

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
The valid files (published.py), likewise: each job_process answer kept as valid (VALID_KEPT)
for the mirror's content now is in `valid/<name>` (the request's words and script), all
removed when that content or the config moves; burst_buffer.lua answers a request one holds
whole without asking.

Who may connect: root and SlurmUser (the config's `slurm_user`, as for `dacctl --function`),
checked on every connection with the peer's credentials (SO_PEERCRED); anyone else is refused
before a byte is read. The socket's directory is this process's own, 0700, or 0750 with
SlurmUser's group when it runs as root: no one else may reach the socket or list it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import pwd
import socket
import struct
import sys
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, cast

from daccore.errors import AdminError, StoreUnavailable
from daccore.services import bbstat, slurm_answer
from daccore.services.command_table import slurm_function
from dacservice.mirror import Mirror, MirrorClient, Unsure
from dacservice.published import PathsFiles, ValidFiles, replace

if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Callable, TypeVar

    from daccore.etcd.client import EtcdClient
    from daccore.etcd.types import Transport
    from daccore.settings.cache import Json
    from daccore.store import Store

    T = TypeVar("T")

__all__ = ["Answerer", "serve", "ask", "SOCKET", "MAGIC", "main"]

log = logging.getLogger(__name__)

#: where burst_buffer.lua looks unless DAC_ANSWERER_SOCKET says otherwise
SOCKET = "/run/dac-answerer/socket"
MAGIC = "dac-answer/1"
MAGIC_CARRYING = "dac-answer/2"
#: seconds a client has to send its line (slurmctld sends it at once)
READ_TIMEOUT = 1.0
#: seconds an answer may wait for etcd when the mirror cannot give it: burst_buffer.lua waits
#: 0.5 s for the reply (DAC_ANSWERER_TIMEOUT), then forks dacctl with the rest of its 2 s
DIRECT_TIMEOUT = 0.3
MAX_LINE = 65536
#: the largest job script a request may carry (burst_buffer.lua's MAX_SCRIPT): a larger one is
#: read by the answer from --job's path, as the forked dacctl reads it
MAX_SCRIPT = 65536
SCRIPT_WORD = "script:"
PATHFILE_WORD = "reply:pathfile"
#: bbstat's word after the function: `caller:<uid>:<gid>`, or `caller:` for no one named
CALLER_WORD = "caller:"
BBSTAT = "bbstat"
#: connections answered at once (worker threads); past that one waits in the listen backlog
MAX_CLIENTS = 8
#: the collector's thresholds while answering: an answer allocates a few thousand short-lived
#: objects, all freed by reference counting (none makes a cycle); at Python's default (700)
#: every answer paid one or more young-generation passes. The mirror's listing is frozen out of
#: every pass (mirror.py, _load).
GC_THRESHOLD = (20_000, 50, 100)
#: seconds a thread holding the GIL (the mirror's watch or probe) keeps a woken worker waiting:
#: Python's default, 5 ms, is the whole p99 budget; at 0.5 ms the in-process p99 fell (three
#: runs each, A/B: the three hooks' p99 summed 11.3 ms against 14.8)
SWITCH_INTERVAL = 0.0005
#: valid job_process answers kept, each by everything it was built from (`_valid_key`): the
#: same script of the same user against the same config and mirror content is valid again
#: without the answer (a workflow's storm of one script). A refusal is never kept (it names
#: the path or a line), nor an answer from etcd (the mirror's content does not say what etcd
#: held). dacctl's parse, checks and dispatch were a third to a half of a job_process round
#: trip after the answerer sat idle (docs/performance.md).
VALID_KEPT = 256
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


def _encode(word: str) -> str:
    return urllib.parse.quote(word, safe="-._/:=,")


class Answerer:
    """`serve_forever()` answers on `path` until `shutdown()`."""

    def __init__(self, path: str):
        self.path = path
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        from daccore.settings.env import config_path

        self._config_path = config_path(None, os.environ)  # the environment is fixed
        self._identity: tuple[object, ...] | None = None
        self._settings: Json = {}
        self._etcd: Json | None = None
        self.mirror: Mirror | None = None
        self._epoch = 0  # raised at every config read (and mirror made): VALID_KEPT
        self._valid: dict[tuple[object, ...], None] = {}
        self._valid_moves = 0  # raised at every change of _valid: the valid files follow it
        self._valid_synced: tuple[object, ...] | None = None
        self._mirror_store: Store | None = None
        self._direct: Store | None = None
        self._stopping = False
        self._reload()  # a config that cannot be read stops the start, with its one line
        slurm_answer.warm()
        bbstat.warm()
        self.listener = _listen(path, self._settings["slurm_user"])
        directory = os.path.dirname(path) or "."
        self.pools_path = os.path.join(directory, POOLS_FILE)
        st = os.stat(directory)  # _listen made it ours, and set its group and mode
        self._group = st.st_gid
        self.paths_files = PathsFiles(directory, st.st_gid, st.st_mode & 0o777)
        self.valid_files = ValidFiles(
            directory, st.st_gid, st.st_mode & 0o777, _file_owner(self._settings["slurm_user"])
        )
        self._published: tuple[object, ...] | None = None  # what the pools file holds
        self._renew_at = 0.0

    # -- the config and the stores -------------------------------------------------------------

    def _reload(self) -> Json:
        """The config as dacctl reads it, again whenever its file changed: a new etcd (another
        endpoint, prefix, credential) gets a new mirror."""
        path = self._config_path
        try:
            st = os.stat(path)
            identity: tuple[object, ...] = (path, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            identity = (path, None)
        if identity == self._identity:
            return self._settings
        with self._lock:
            if identity == self._identity:
                return self._settings
            settings = slurm_answer.settings_for_caller()  # raises: the caller refuses
            if settings["etcd"] != self._etcd:
                self._connect(settings["etcd"])
            self._settings, self._identity = settings, identity
            self._epoch += 1  # what a kept answer was built from is gone
            self._valid.clear()
            self._valid_moves += 1
            log.info("config %s read; answering for uids %s", path, sorted(self._allowed()))
        return self._settings

    def _connect(self, etcd: Json) -> None:
        from daccore.store import Store

        old = self.mirror
        self._direct = _bounded(Store.from_dict(etcd, transport="http", max_timeout=DIRECT_TIMEOUT))
        watching = Store.from_dict(etcd, transport="http")
        self.mirror = Mirror(watching.client, etcd["prefix"])
        # a MirrorClient answers the reads Store makes of an EtcdClient (mirror.py)
        client = cast("EtcdClient", MirrorClient(self.mirror, watching.client.endpoints))
        self._mirror_store = _summary_per_change(Store(client, etcd["prefix"]), self.mirror)
        self._etcd = etcd
        if old is not None:
            old.stop()
        mirror = self.mirror
        threading.Thread(target=self._start_mirror, args=(mirror,), daemon=True).start()

    def _start_mirror(self, mirror: Mirror) -> None:
        """Until etcd answers a first listing: meanwhile every answer reads etcd (or is
        refused)."""
        while not self._stopping and mirror is self.mirror:
            try:
                mirror.start()
                return
            except StoreUnavailable as e:
                log.warning("cannot list etcd for the mirror yet: %s", e)
                time.sleep(1.0)

    def _allowed(self) -> frozenset[int]:
        uids: frozenset[int] = self._settings.get("trusted_uids", frozenset({0}))
        return uids

    # -- serving ------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """MAX_CLIENTS threads, each accepting and answering one connection at a time: no
        thread is started, and no socket handed over, per request."""
        workers = [
            threading.Thread(target=self._work, name=f"answer-{i}", daemon=True)
            for i in range(MAX_CLIENTS)
        ]
        for w in workers:
            w.start()
        publisher = threading.Thread(target=self._publisher, name="pools-file", daemon=True)
        publisher.start()
        self._stopped.wait()
        for w in workers:
            w.join(timeout=READ_TIMEOUT + DIRECT_TIMEOUT + 1)
        publisher.join(timeout=DIRECT_TIMEOUT + 1)  # so close() removes its last file for good

    def _work(self) -> None:
        while not self._stopping:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.01)  # out of descriptors, say: the backlog waits
                continue
            try:
                with sock:
                    sock.sendall(self._reply(sock))
            except OSError:
                pass  # the caller went away (timed out, and forks dacctl)
            except Exception:  # noqa: BLE001 - a bug must not end the worker; the caller forks
                log.exception("answering failed")

    # -- the pools file -----------------------------------------------------------------------

    def _publisher(self) -> None:
        while not self._stopped.wait(PUBLISH_EVERY):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - the file goes; the hook asks the socket
                log.exception("writing %s failed", self.pools_path)
                self._unpublish()

    def publish(self, now: float | None = None) -> None:
        """The pools file made to hold what the socket would answer now, or removed when the
        mirror is not confirmed current (module docstring); the paths files
        (dacservice/published.py) made to follow the mirror first, so that a pools file
        believed vouches for them too."""
        mirror = self.mirror
        if mirror is None or not mirror.fresh():
            self._unpublish()
            return
        now = time.time() if now is None else now
        what = (mirror, mirror.changes, self._identity)
        if what == self._published and now < self._renew_at:
            self._sync_valid(mirror)  # answers kept since
            return
        source, result = self.answer("pools", [])
        if source != "mirror" or isinstance(result, str):
            self._unpublish()  # refused, or etcd's answer: not the mirror's, so not kept
            return
        if what != self._published:  # the mirror's content or the config moved
            n = self.paths_files.update(mirror, self._settings["mount_root"])
            if n:
                with self._lock:
                    self.counts["paths:files"] = self.counts.get("paths:files", 0) + n
        self._sync_valid(mirror)
        rc, out, _ = result
        body = out.encode("utf-8", "surrogateescape")
        expires = pools_expiry(now)
        head = b"%s %d %d %d\n" % (POOLS_MAGIC, expires, rc, len(body))
        replace(self.pools_path, head + body, self._group)
        self._published, self._renew_at = what, renewal(now)
        self._count("pools:file")

    def _sync_valid(self, mirror: Mirror) -> None:
        """The valid files (published.py) made to hold the answers kept for the mirror's
        content and the config as they are now: the others removed."""
        with self._lock:
            epoch, changes = self._epoch, mirror.changes
            synced = (mirror, epoch, changes, self._valid_moves)
            if synced == self._valid_synced:
                return
            entries = [
                (" ".join(cast("tuple[str, ...]", k[0])), cast("bytes", k[1]))
                for k in self._valid
                if k[2] == epoch and k[3] == changes
            ]
        n = self.valid_files.sync((mirror, epoch, changes), entries)
        self._valid_synced = synced
        if n:
            with self._lock:
                self.counts["valid:files"] = self.counts.get("valid:files", 0) + n

    def _unpublish(self) -> None:
        if self._published is not None or os.path.lexists(self.pools_path):
            try:
                os.unlink(self.pools_path)
            except FileNotFoundError:
                pass
            self._published = None

    def shutdown(self) -> None:
        """From any thread (a signal handler too): the workers stop accepting."""
        self._stopping = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the workers' accept()
        except OSError:
            pass
        self._stopped.set()

    def close(self) -> None:
        self.shutdown()
        if self.mirror is not None:
            self.mirror.stop()
        self.listener.close()
        for path in (self.path, self.pools_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        self.paths_files.clear()
        self.valid_files.clear()

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def _reply(self, sock: socket.socket) -> bytes:
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid not in self._allowed():
            self._count("refused_peer")
            log.warning("uid %d refused: only root and SlurmUser may ask", uid)
            return b"REFUSE only root and SlurmUser may ask\n"
        sock.settimeout(READ_TIMEOUT)
        line, rest = _read_line(sock)
        words = line.split(" ")
        if words[0] not in (MAGIC, MAGIC_CARRYING) or len(words) < 2:
            return b"REFUSE not a dac-answer/1 or /2 request\n"
        function, script, pathfile_reply, caller = words[1], None, False, None
        carrying = words[0] == MAGIC_CARRYING and len(words) > 2
        if carrying and words[2].startswith(CALLER_WORD):
            if function != BBSTAT:
                return b"REFUSE only bbstat names its caller\n"
            caller = _decode(words[2][len(CALLER_WORD) :])
            del words[2]
        elif carrying and words[2] == PATHFILE_WORD:
            if function != "paths":
                return b"REFUSE only paths replies with its path file's lines\n"
            pathfile_reply = True
            del words[2]
        elif carrying and words[2].startswith(SCRIPT_WORD):
            n = words[2][len(SCRIPT_WORD) :]
            if function != "job_process" or not n.isdigit() or int(n) > MAX_SCRIPT:
                return b"REFUSE only job_process carries a script, of at most %d bytes\n" % (
                    MAX_SCRIPT
                )
            script = _read_bytes(sock, rest, int(n))
            if script is None:
                return b"REFUSE a job script cut short\n"
            del words[2]
        args = [_decode(w) for w in words[2:]]
        if function == "stats":
            with self._lock:
                stats = json.dumps(
                    {**self.counts, "fresh": bool(self.mirror and self.mirror.fresh())}
                )
            return b"ANSWER 0 %d\n" % len(stats) + stats.encode()
        if function == BBSTAT:
            if caller is None:
                return b"REFUSE bbstat names its caller: dac-answer/2 bbstat caller:[<uid>:<gid>]\n"
            return self._reply_bbstat(caller, args)
        row = slurm_function(function)
        if row is None or not row.hot:  # the command table's column
            return b"REFUSE only job_process, pools, paths and bbstat are answered here\n"
        source, result = self.answer(function, args, script, pathfile_reply)
        if source is None:
            self._count(f"{function}:refused")
            log.info("%s refused: %s", function, result)
            return f"REFUSE {' '.join(str(result).split())}\n".encode()
        self._count(f"{function}:{source}")
        assert not isinstance(result, str)  # answered: only a refusal has no source
        rc, out, err = result
        body = out.encode("utf-8", "surrogateescape")
        return b"ANSWER %d %d\n" % (rc, len(body)) + body + err.encode("utf-8", "surrogateescape")

    def _reply_bbstat(self, caller: str, words: list[str]) -> bytes:
        # an empty word comes as NUL, which no argv word holds (module docstring)
        source, text = self.answer_bbstat(caller, ["" if w == "\0" else w for w in words])
        if source is None:
            self._count("bbstat:refused")
            log.info("bbstat refused: %s", text)
            return f"REFUSE {' '.join(text.split())}\n".encode()
        self._count(f"bbstat:{source}")
        body = text.encode("utf-8", "surrogateescape")
        return b"ANSWER 0 %d\n" % len(body) + body

    def answer_bbstat(self, caller: str, words: list[str]) -> tuple[str | None, str]:
        """(source, what dac-bbstat prints for `words` asked by `caller`, DAC_BBSTAT_CALLER's
        form): source "mirror" when the answer read only what the mirror holds (the pools, a
        refused word), "etcd" when it read etcd (a job's statuses and stages, the views of
        sessions: the mirror holds no status); (None, why) refused, and the caller forks
        dac-bbstat. The mirror is tried first, as `answer` does; where it is unsure, etcd
        within DIRECT_TIMEOUT."""
        try:
            settings = self._reload()
        except Exception as e:  # noqa: BLE001 - the forked dac-bbstat says it in its one line
            return None, f"config: {e}"
        mirror, why = self.mirror, "no mirror yet"
        if mirror is not None and mirror.fresh():
            try:
                with mirror.lock:
                    if mirror.fresh():
                        return "mirror", bbstat.answer(words, caller, settings, self._mirror_store)
                    why = "the mirror is not confirmed current"
            except Unsure as e:
                why = str(e)
        elif mirror is not None:
            why = "the mirror is not confirmed current"
            gone = mirror.out_of_reach()
            if gone:
                return None, f"{why}; {gone}"
        try:
            return "etcd", bbstat.answer(words, caller, settings, self._direct)
        except Unsure as e:
            return None, f"{why}; {e}"

    def _valid_key(
        self, function: str, args: list[str], script: bytes | None, epoch: int
    ) -> tuple[object, ...] | None:
        """What a valid job_process answer is kept by (VALID_KEPT), but the mirror's content
        (`changes`, added by the caller): the script's bytes (compared whole), the other
        words of the request (the user) and `epoch`, the config read and the mirror that
        answered (`_reload` raises it and empties the memo). Not --job's path: a valid answer
        is empty, and job_process reads its path only for the script. None when there is
        nothing to key by: no script carried, or no --job."""
        if function != "job_process" or script is None:
            return None
        try:
            at = args.index("--job")
        except ValueError:
            return None
        return (tuple(args[:at] + args[at + 2 :]), script, epoch)

    def _keep_valid(self, key: tuple[object, ...], epoch: int) -> None:
        with self._lock:
            if epoch != self._epoch:
                return  # the config or the mirror changed meanwhile: built from the old
            if len(self._valid) >= VALID_KEPT:
                self._valid.clear()  # a full memo starts again: simpler than an order, and rare
            self._valid[key] = None
            self._valid_moves += 1

    def answer(
        self,
        function: str,
        args: list[str],
        script: bytes | None = None,
        pathfile_reply: bool = False,
    ) -> tuple[str, tuple[int, str, str]] | tuple[None, str]:
        """(source, (rc, stdout, stderr)): source "mirror", "etcd", or "kept" (a valid
        job_process answer given again, VALID_KEPT); (None, why) refused. `script`:
        job_process's script as the peer sent it; `pathfile_reply`: paths's lines answered,
        not written (slurm_answer.answer)."""
        try:
            settings = self._reload()
        except Exception as e:  # noqa: BLE001 - dacctl forked will say it in its one line
            return None, f"config: {e}"
        epoch = self._epoch  # before what it stands for is read: _keep_valid
        argv = ["--function", function, *args]
        mirror, store, why = self.mirror, self._mirror_store, "no mirror yet"
        if mirror is not None and mirror.fresh():
            key = self._valid_key(function, args, script, epoch)
            if key is not None and (*key, mirror.changes) in self._valid:
                return "kept", (0, "", "")
            try:
                with mirror.lock:
                    if mirror.fresh():
                        result = slurm_answer.answer(argv, settings, store, script, pathfile_reply)
                        if key is not None and result == (0, "", ""):
                            self._keep_valid((*key, mirror.changes), epoch)
                        return "mirror", result
                    why = "the mirror is not confirmed current"
            except Unsure as e:
                why = str(e)
        elif mirror is not None:
            why = "the mirror is not confirmed current"
            gone = mirror.out_of_reach()
            if gone:  # no read of etcd would be answered in time: refused at once
                return None, f"{why}; {gone}"
        try:
            return "etcd", slurm_answer.answer(argv, settings, self._direct, script, pathfile_reply)
        except Unsure as e:
            return None, f"{why}; {e}"


def _summary_per_change(store: Store, mirror: Mirror) -> Store:
    """`store` (the mirror's) whose `summary_inventory()` is built once per mirror content, not
    once per answer: every `pools` and every `job_process` reads it, and it was a third of a
    `job_process` answer (the capacity records' JSON parsed, the claims counted). The content
    is the mirror's as of `mirror.changes`, which every listing and every event on a mirrored
    key raises (a probe, or a write elsewhere under the prefix, moves the revision alone);
    answers are built under `mirror.lock`, which holds it still. The inventory's readers
    (`summarize`, `jobs.validate`) only read it, and none reads its revision; so its summary
    is kept with it (`freeze_summary`)."""
    build = store.summary_inventory
    memo: list[Any] = [None, None]  # [mirror.changes, Inventory]

    def summary_inventory() -> Any:
        key = mirror.changes
        if memo[0] != key:
            memo[1] = build().freeze_summary()  # Unsure propagates, and nothing is kept
            memo[0] = key
        return memo[1]

    store.summary_inventory = summary_inventory  # type: ignore[method-assign]  # this store only
    return store


def _bounded(store: Store) -> Store:
    """`store` whose etcd out of reach (past DIRECT_TIMEOUT) is `Unsure`, not an answer: the
    fork that follows has the rest of the 2 s, and its own one line."""
    call = store.client._call

    def bounded(fn: Callable[[Transport], T]) -> T:
        try:
            return call(fn)
        except StoreUnavailable as e:
            raise Unsure(f"etcd out of reach: {e}") from None

    store.client._call = bounded  # type: ignore[method-assign]  # this store's client only
    return store


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


def _decode(word: str) -> str:
    """A request's word: percent-decoded where it holds an escape (most words hold none)."""
    return urllib.parse.unquote(word) if "%" in word else word


def _read_line(sock: socket.socket) -> tuple[str, bytes]:
    """The request's line, and what came after it in the same reads."""
    data = b""
    while b"\n" not in data:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:  # silent past READ_TIMEOUT: refused in one line, as garbage is
            return "", b""
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_LINE and b"\n" not in data:
            return "", b""
    line, _, rest = data.partition(b"\n")
    if len(line) > MAX_LINE:
        return "", b""
    return line.decode("ascii", "replace").strip(), rest


def _read_bytes(sock: socket.socket, data: bytes, n: int) -> bytes | None:
    """`n` bytes, `data` the first of them: None when the peer sends fewer (or more) before
    it stops or READ_TIMEOUT passes."""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            return None
        if not chunk:
            return None
        data += chunk
    return data if len(data) == n else None


def _listen(path: str, slurm_user: str | None) -> socket.socket:
    """The socket, in a directory of this process's own that no one but root and SlurmUser
    may enter (module docstring); AdminError when the directory is someone else's or another
    answerer listens there."""
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
    except OSError as e:
        raise AdminError(f"answerer: cannot make {directory}: {e.strerror}") from None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise AdminError(
            f"answerer: {directory} must be a directory of uid {os.geteuid()}'s (the "
            f"answerer's own), not uid {st.st_uid}'s"
        )
    group, mode = st.st_gid, 0o700
    if os.geteuid() == 0 and slurm_user:
        try:
            pw = pwd.getpwnam(slurm_user)
        except KeyError:
            pw = None
        if pw is not None and pw.pw_uid != 0:
            group, mode = pw.pw_gid, 0o750
    os.chown(directory, os.geteuid(), group)
    os.chmod(directory, mode)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        raise AdminError(f"answerer: another answerer listens on {path}")
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o660)
    os.chown(path, os.geteuid(), group)  # run as root: SlurmUser connects through its group
    listener.listen(128)
    return listener


def serve(path: str, ready: Callable[[], object] | None = None) -> None:
    """Answer on `path` until SIGTERM or SIGINT; `ready()` once it listens."""
    import signal

    server = Answerer(path)
    gc.set_threshold(*GC_THRESHOLD)
    sys.setswitchinterval(SWITCH_INTERVAL)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("dac answerer on %s", path)
    if ready:
        ready()
    try:
        server.serve_forever()
    finally:
        server.close()


def ask(
    path: str,
    function: str,
    args: list[str],
    timeout: float = 2.0,
    script: bytes | None = None,
    pathfile_reply: bool = False,
    caller: str | None = None,
) -> tuple[Any, ...]:
    """What burst_buffer.lua does, in Python (tests, bench): ("ANSWER", rc, stdout, stderr)
    or ("REFUSE", reason). `script`: job_process's script, sent with the request;
    `pathfile_reply`: paths's lines asked for in the reply; `caller`: bbstat's caller,
    DAC_BBSTAT_CALLER's form ("" for no one named) (module docstring)."""
    carried = [] if script is None else [f"{SCRIPT_WORD}{len(script)}"]
    carried += [PATHFILE_WORD] if pathfile_reply else []
    carried += [] if caller is None else [CALLER_WORD + _encode(caller)]
    magic = MAGIC_CARRYING if carried else MAGIC
    if caller is not None:  # bbstat's words: an empty one as NUL, as burst_buffer.lua sends it
        args = ["\0" if a == "" else a for a in args]
    line = " ".join([magic, function, *carried, *(_encode(a) for a in args)]) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(line.encode("utf-8", "surrogateescape") + (script or b""))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\n")
    words = head.decode().split(" ", 3)
    if words[0] == "ANSWER":
        n = int(words[2])
        return ("ANSWER", int(words[1]), body[:n].decode(), body[n:].decode())
    return ("REFUSE", head.decode().partition(" ")[2])


def main(argv: list[str] | None = None) -> int:
    """`dac-answerer [--socket PATH]`: run as SlurmUser (or root) on the Slurm controller,
    with the DAC_CONFIG slurmctld's hooks use (daccore/share/packaging/dac-answerer.service)."""
    import argparse

    p = argparse.ArgumentParser(prog="dac-answerer", description=main.__doc__)
    p.add_argument("--socket", default=os.environ.get("DAC_ANSWERER_SOCKET") or SOCKET)
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s dac-answerer[%(process)d] %(message)s"
    )
    from daccore.errors import DacError
    from daccore.services.slurm_args import Refused

    try:
        serve(args.socket)
    except (DacError, Refused) as e:
        print(f"dac-answerer: {e}", file=sys.stderr)
        return 1
    return 0
