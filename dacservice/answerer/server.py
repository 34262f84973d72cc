"""The answerer's socket and process: `Server` takes each connection, reads its request
(wire.py) and replies with `Answerer`'s answer (answers.py), while its `Publisher` keeps the
files beside the socket (publisher.py); `serve` and `main` run it, as `dac-answerer`.

Who may connect: root and SlurmUser (the config's `slurm_user`, as for `dacctl --function`),
checked on every connection with the peer's credentials (SO_PEERCRED); anyone else is refused
before a byte is read. The socket's directory is this process's own, 0700, or 0750 with
SlurmUser's group when it runs as root: no one else may reach the socket or list it.
"""

from __future__ import annotations

import gc
import logging
import os
import pwd
import socket
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING

from daccore.errors import AdminError
from daccore.services.command_table import slurm_function
from dacservice.answerer.answers import DIRECT_TIMEOUT, Answerer
from dacservice.answerer.publisher import Publisher
from dacservice.answerer.wire import BBSTAT, READ_TIMEOUT, SOCKET, read_request

if TYPE_CHECKING:
    from types import FrameType
    from typing import Callable

__all__ = ["Server", "serve", "main", "MAX_CLIENTS"]

log = logging.getLogger(__name__)

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


class Server:
    """`serve_forever()` answers on `path` until `shutdown()`."""

    def __init__(self, path: str):
        self.path = path
        self._stopping = False
        self._stopped = threading.Event()
        self.answerer = Answerer()  # a config that cannot be read stops the start
        self.listener = _listen(path, self.answerer.settings["slurm_user"])
        self.publisher = Publisher(self.answerer, os.path.dirname(path) or ".")

    def serve_forever(self) -> None:
        """MAX_CLIENTS threads, each accepting and answering one connection at a time: no
        thread is started, and no socket handed over, per request."""
        workers = [
            threading.Thread(target=self._work, name=f"answer-{i}", daemon=True)
            for i in range(MAX_CLIENTS)
        ]
        for w in workers:
            w.start()
        publisher = threading.Thread(
            target=self.publisher.run, args=(self._stopped,), name="pools-file", daemon=True
        )
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

    def shutdown(self) -> None:
        """From any thread (a signal handler too): the workers stop accepting."""
        self._stopping = True
        self.answerer.stop()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the workers' accept()
        except OSError:
            pass
        self._stopped.set()

    def close(self) -> None:
        self.shutdown()
        self.answerer.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.publisher.clear()

    def _reply(self, sock: socket.socket) -> bytes:
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        answerer = self.answerer
        if uid not in answerer.allowed():
            answerer.count("refused_peer")
            log.warning("uid %d refused: only root and SlurmUser may ask", uid)
            return b"REFUSE only root and SlurmUser may ask\n"
        sock.settimeout(READ_TIMEOUT)
        request = read_request(sock)
        if isinstance(request, bytes):
            return request  # refused by its shape
        function, args = request.function, request.args
        if function == "stats":
            stats = answerer.stats()
            return b"ANSWER 0 %d\n" % len(stats) + stats.encode()
        if function == BBSTAT:
            if request.caller is None:
                return b"REFUSE bbstat names its caller: dac-answer/2 bbstat caller:[<uid>:<gid>]\n"
            return self._reply_bbstat(request.caller, args)
        row = slurm_function(function)
        if row is None or not row.hot:  # the command table's column
            return b"REFUSE only job_process, pools, paths and bbstat are answered here\n"
        source, result = answerer.answer(function, args, request.script, request.pathfile_reply)
        if source is None:
            answerer.count(f"{function}:refused")
            log.info("%s refused: %s", function, result)
            return f"REFUSE {' '.join(str(result).split())}\n".encode()
        answerer.count(f"{function}:{source}")
        assert not isinstance(result, str)  # answered: only a refusal has no source
        rc, out, err = result
        body = out.encode("utf-8", "surrogateescape")
        return b"ANSWER %d %d\n" % (rc, len(body)) + body + err.encode("utf-8", "surrogateescape")

    def _reply_bbstat(self, caller: str, words: list[str]) -> bytes:
        # an empty word comes as NUL, which no argv word holds (wire.py)
        source, text = self.answerer.answer_bbstat(caller, ["" if w == "\0" else w for w in words])
        if source is None:
            self.answerer.count("bbstat:refused")
            log.info("bbstat refused: %s", text)
            return f"REFUSE {' '.join(text.split())}\n".encode()
        self.answerer.count(f"bbstat:{source}")
        body = text.encode("utf-8", "surrogateescape")
        return b"ANSWER 0 %d\n" % len(body) + body


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

    server = Server(path)
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
