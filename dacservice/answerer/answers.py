"""The answerer's answers: `Answerer` holds the config, the stores and the valid answers kept,
and answers a request, whatever carried it (server.py reads it off the socket).

The answers are dacctl's own: each request runs `daccore.services.slurm_answer.answer`, the
very code of `dacctl --function`, for the functions the command table marks `hot`
(daccore/services/command_table.py), with the config this process keeps (reloaded when the
file changes) and a store that reads the in-memory mirror of etcd (mirror.py) while the mirror
is confirmed current, etcd itself (bounded by DIRECT_TIMEOUT) otherwise or where the mirror is
unsure. When neither can answer for sure, the answerer refuses, and burst_buffer.lua forks
`dacctl --function` with what is left of its 2 s: Slurm never loses a hook.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, cast

from daccore.errors import StoreUnavailable
from daccore.services import bbstat, slurm_answer
from dacservice.answerer.mirror import Mirror, MirrorClient, Unsure

if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    from daccore.etcd.client import EtcdClient
    from daccore.etcd.types import Transport
    from daccore.settings.cache import Json
    from daccore.store import Store

    T = TypeVar("T")

__all__ = ["Answerer", "DIRECT_TIMEOUT", "VALID_KEPT"]

log = logging.getLogger(__name__)

#: seconds an answer may wait for etcd when the mirror cannot give it: burst_buffer.lua waits
#: 0.5 s for the reply (DAC_ANSWERER_TIMEOUT), then forks dacctl with the rest of its 2 s
DIRECT_TIMEOUT = 0.3
#: valid job_process answers kept, each by everything it was built from (`_valid_key`): the
#: same script of the same user against the same config and mirror content is valid again
#: without the answer (a workflow's storm of one script). A refusal is never kept (it names
#: the path or a line), nor an answer from etcd (the mirror's content does not say what etcd
#: held). dacctl's parse, checks and dispatch were a third to a half of a job_process round
#: trip after the answerer sat idle (docs/performance.md).
VALID_KEPT = 256


class Answerer:
    """The config as dacctl reads it, the mirror of etcd and etcd itself, and the valid
    answers kept; `answer` and `answer_bbstat` from any thread."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        from daccore.settings.env import config_path

        self._config_path = config_path(None, os.environ)  # the environment is fixed
        self._identity: tuple[object, ...] | None = None
        self._settings: Json = {}
        self._etcd: Json | None = None
        self.mirror: Mirror | None = None
        self._epoch = 0  # raised at every config read (and mirror made): VALID_KEPT
        self._valid: dict[tuple[object, ...], None] = {}
        self._valid_moves = 0  # raised at every change of _valid: the valid files follow it
        self._mirror_store: Store | None = None
        self._direct: Store | None = None
        self._stopping = False
        self._reload()  # a config that cannot be read stops the start, with its one line
        slurm_answer.warm()
        bbstat.warm()

    # -- the config and the stores -------------------------------------------------------------

    @property
    def settings(self) -> Json:
        """The config as last read."""
        return self._settings

    @property
    def identity(self) -> tuple[object, ...] | None:
        """The config file's as last read: another one is another config."""
        return self._identity

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
            log.info("config %s read; answering for uids %s", path, sorted(self.allowed()))
        return self._settings

    def _connect(self, etcd: Json) -> None:
        from daccore.store import Store
        from daccore.store.base import client_from_dict

        old = self.mirror
        direct = _bounded(client_from_dict(etcd, transport="http", max_timeout=DIRECT_TIMEOUT))
        self._direct = Store(direct, etcd["prefix"])
        watching = client_from_dict(etcd, transport="http")
        self.mirror = Mirror(watching, etcd["prefix"])
        # a MirrorClient answers the reads Store makes (mirror.py)
        client = MirrorClient(self.mirror, watching.endpoints)
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

    def allowed(self) -> frozenset[int]:
        """The uids that may ask: root and SlurmUser, as for `dacctl --function`."""
        uids: frozenset[int] = self._settings.get("trusted_uids", frozenset({0}))
        return uids

    def stop(self) -> None:
        """From any thread (a signal handler too): no mirror is started any more."""
        self._stopping = True

    def close(self) -> None:
        self.stop()
        if self.mirror is not None:
            self.mirror.stop()

    # -- the counters ---------------------------------------------------------------------------

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def stats(self) -> str:
        """The counters, and whether the mirror is confirmed current, as JSON (`stats`)."""
        with self._lock:
            return json.dumps({**self.counts, "fresh": bool(self.mirror and self.mirror.fresh())})

    # -- the answers ----------------------------------------------------------------------------

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

    def valid_kept(
        self, mirror: Mirror, synced: object
    ) -> tuple[tuple[object, ...], list[tuple[str, bytes]]] | None:
        """(what they stand for, (words, script) of each) of the valid answers kept for the
        mirror's content and the config as they are now, for the valid files (published.py);
        None when they stand for `synced` still: nothing moved since."""
        with self._lock:
            epoch, changes = self._epoch, mirror.changes
            stamp = (mirror, epoch, changes, self._valid_moves)
            if stamp == synced:
                return None
            entries = [
                (" ".join(cast("tuple[str, ...]", k[0])), cast("bytes", k[1]))
                for k in self._valid
                if k[2] == epoch and k[3] == changes
            ]
        return stamp, entries

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


def _bounded(client: EtcdClient) -> EtcdClient:
    """`client` whose etcd out of reach (past DIRECT_TIMEOUT) is `Unsure`, not an answer: the
    fork that follows has the rest of the 2 s, and its own one line."""
    call = client._call

    def bounded(fn: Callable[[Transport], T]) -> T:
        try:
            return call(fn)
        except StoreUnavailable as e:
            raise Unsure(f"etcd out of reach: {e}") from None

    client._call = bounded  # type: ignore[method-assign]  # this client only
    return client
