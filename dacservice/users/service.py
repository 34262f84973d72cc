"""The user service's workers: each line the reader (reader.py) hands on is checked by munged
(credentials.py), then answered for the uid it proves in one of that uid's PER_UID slots, or
parked, holding no thread, until one is free (`_Service`).
"""

from __future__ import annotations

import collections
import json
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from daccore.errors import AdminError, DacError
from daccore.services.user_requests import answer
from dacservice.users.credentials import caller, decode_origin
from dacservice.users.reader import _Reader
from dacservice.users.replies import INTERNAL, busy_error, error, finish

if TYPE_CHECKING:
    from daccore.settings.config import DacConfig
    from daccore.store import Store

__all__ = ["MAX_CLIENTS", "PER_UID", "MAX_PARKED"]

log = logging.getLogger(__name__)

#: requests checked and answered at once (worker threads): a slot is taken only by a whole
#: line, and held past unmunge only by an authenticated request (create-persistent may wait
#: step_timeout for dacd, so a slot is not always short)
MAX_CLIENTS = 32
#: of those, one uid's at most; its further requests wait, holding no thread, up to MAX_PARKED
PER_UID = 4
MAX_PARKED = 64

#: a request waiting for one of its uid's slots: (connection, peer, uid, gid, origin, request)
_Task = tuple[socket.socket, str, int, int, str, dict[str, Any]]


class _Service(_Reader):
    """The reader (`_Reader`), and MAX_CLIENTS worker threads that take its lines round robin
    across peers (`Lines`) for unmunge; then the request is answered in one of the caller's
    PER_UID slots, or waits (parked, holding no thread) for one of that uid's requests to
    end. A reply is written without blocking: what the client does not take at once, the
    reader writes as it is taken (`_reply`)."""

    def __init__(self, address: tuple[str, int], config: DacConfig, store: Store):
        self.config, self.store = config, store
        super().__init__(address)
        self.lock = threading.Lock()
        self.active: dict[int, int] = {}  # uid -> requests being answered
        self.parked: dict[int, collections.deque[_Task]] = {}  # uid -> requests waiting for a slot
        self.workers = [
            threading.Thread(target=self._worker, daemon=True, name=f"usvc-{i}")
            for i in range(MAX_CLIENTS)
        ]

    def serve_forever(self) -> None:
        for t in self.workers:
            t.start()
        super().serve_forever()

    def _worker(self) -> None:
        while (item := self.lines.take()) is not None:
            peer, started = item[0], time.thread_time()
            try:
                task = self._check(*item)
            finally:
                self.lines.done(peer)
            spent = time.thread_time() - started
            if task is None:
                self.budget.spend(peer, spent)
            else:
                self._serve(task, spent)

    def _check(self, peer: str, sock: socket.socket, line: bytes) -> _Task | None:
        """The request a line carries, as munged verified it; None when refused (answered)."""
        try:
            uid, gid, origin, request = decode_origin(line, self.config.munge_socket)
        except AdminError as e:  # munged unreachable: the site's problem, every time
            log.warning("%s: not checked: %s", peer, e)
            self._reply(sock, peer, error(e))
            return None
        except DacError as e:
            self.damper.refused(peer, e)
            self._reply(sock, peer, error(e))
            return None
        except Exception:  # noqa: BLE001 - as in _answer
            log.exception("%s: failed before its credential was checked", peer)
            self._reply(sock, peer, INTERNAL)
            return None
        return sock, peer, uid, gid, origin, request

    def _serve(self, new: _Task, spent: float) -> None:
        """`new` answered in one of its uid's slots, then that uid's parked requests; or
        parked itself when the uid has none free; or refused when the uid has no time left
        (`spent`, its unmunge's, counted first) or too many requests under way."""
        uid = new[2]
        task: _Task | None = None
        why = ""
        wait = self.budget.spend(f"uid {uid}", spent)
        with self.lock:
            if wait:
                why = f"your requests took their share of it: {wait}s to wait"
            elif self.active.get(uid, 0) < PER_UID:
                self.active[uid] = self.active.get(uid, 0) + 1
                task = new
            elif len(waiting := self.parked.setdefault(uid, collections.deque())) < MAX_PARKED:
                waiting.append(new)
            else:
                why = f"{PER_UID + MAX_PARKED} requests of yours are under way"
        if why:
            self.damper.refused(f"uid {uid}", f"busy: {why}")
            self._reply(new[0], new[1], error(busy_error(why)))
        while task is not None:  # then this uid's parked requests, one by one
            sock, peer, uid, gid, origin, request = task
            started = time.thread_time()
            try:
                self._reply(sock, peer, self._answer(uid, gid, request, origin))
            finally:
                self.budget.spend(f"uid {uid}", time.thread_time() - started)
                task = self._next_of(uid)

    def _next_of(self, uid: int) -> _Task | None:
        with self.lock:
            waiting = self.parked.get(uid)
            if waiting:
                task = waiting.popleft()
                if not waiting:
                    del self.parked[uid]
                return task
            self.active[uid] -= 1
            if not self.active[uid]:
                del self.active[uid]
            return None

    def _answer(
        self, uid: int, gid: int, request: dict[str, Any], origin: str = ""
    ) -> dict[str, Any]:
        verb = request.get("verb")
        try:
            who = caller(uid, gid, self.config.admin_group, origin)
            result = answer(self.store, self.config, who, verb, request.get("args", {}))
            log.info("uid %s: %s %s: ok", uid, json.dumps(verb), json.dumps(request.get("args")))
            return {"ok": result}
        except DacError as e:
            log.info("uid %s: %s: refused: %s", uid, json.dumps(verb), e)
            return error(e)
        except Exception:  # a bug must not end the service, nor reach the user as a traceback
            log.exception("uid %s: %s: failed", uid, json.dumps(verb))
            return INTERNAL

    def _reply(self, sock: socket.socket, peer: str, reply: dict[str, Any]) -> None:
        """The reply, without blocking: whole, then the close; or what the client has not
        taken handed to the reader, which writes it as it is taken (`_writable`), so a client
        that never reads holds no worker. The request was read to its end, so the close is no
        reset."""
        data = json.dumps(reply).encode() + b"\n"
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the client went away: nothing more is owed to it
            sock.close()
            return
        if sent == len(data):
            finish(sock)
            return
        self.replies.append((sock, peer, data[sent:]))
        self._wake()
