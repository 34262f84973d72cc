"""A stand-in for dac-answerer on a unix socket, for the tests of the Lua clients that ask it
(burst_buffer.lua's in-process hooks, the datawarp forwarder dw_wlm_cli.lua)."""

import socket
import threading
import time
from pathlib import Path


class FakeAnswerer:
    """Answers every connection with `reply` after `delay` seconds; keeps the request lines,
    and the job script a line says follows it (`script:<n>`), or None, in `scripts`."""

    def __init__(self, path: Path, reply: bytes, delay: float = 0.0):
        self.path, self.reply, self.delay = path, reply, delay
        self.lines: list[str] = []
        self.scripts: list[bytes | None] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            while not self.stopped:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                with conn:
                    data = b""
                    while b"\n" not in data:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    line, _, rest = data.partition(b"\n")
                    words = line.split(b" ")
                    script = None
                    if len(words) > 2 and words[2].startswith(b"script:"):
                        n = int(words[2][len(b"script:") :])
                        while len(rest) < n and (chunk := conn.recv(n - len(rest))):
                            rest += chunk
                        script, rest = rest[:n], rest[n:]
                        del words[2]
                    self.lines.append((b" ".join(words) + b"\n" + rest).decode())
                    self.scripts.append(script)
                    time.sleep(self.delay)
                    try:
                        conn.sendall(self.reply)
                    except OSError:
                        pass
        finally:
            self.sock.close()

    def __enter__(self) -> "FakeAnswerer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self):
        """Stops accepting. The serving thread closes the socket as it ends: closed here,
        its number could be a later test's socket while this thread still sleeps out
        `delay`, and that thread would then answer the later test's connection."""
        self.stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass


def raw_request(sock, data: bytes, *, shut: bool = False, timeout: float = 5) -> bytes:
    """A real answerer's whole reply to `data` sent on its socket `sock` as this process
    (`shut`: then no more to send): the wire protocol's tests (system, security)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        if data:
            s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
        return reply
