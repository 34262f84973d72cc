"""A stand-in for dac-answerer on a unix socket, for the tests of the Lua clients that ask it
(burst_buffer.lua's in-process hooks, the datawarp forwarders dw_wlm_cli.lua and dwstat.lua),
and what those tests run them in: each Lua version, and the `slurm` table Slurm gives them."""

import os
import socket
import threading
import time
from pathlib import Path
from typing import NoReturn

import pytest

#: every Lua a slurmctld links or a forwarder may run under: Debian's 5.1 (its Slurm's), RHEL's
#: 5.3 (EL8) and 5.4 (EL9 and later), and 5.2 between (scripts/install-system-deps installs
#: each interpreter, its liblua and lua-socket)
LUAS = ("lua5.1", "lua5.2", "lua5.3", "lua5.4")

#: The `slurm` table burst_buffer/lua gives the script (src/lua/slurm_lua.c,
#: _register_slurm_output_functions): its numbers pushed with lua_pushnumber, so floats on Lua
#: 5.3+ (SUCCESS is 0.0 there); log_info and log_error the very chunks Slurm compiles, around
#: slurm.log and slurm.error, which write the line to stderr here.
SLURM_TABLE = r"""
slurm = {ERROR = -1.0, FAILURE = -1.0, SUCCESS = 0.0}
function slurm.log(level, message) io.stderr:write(message, "\n") end
function slurm.error(message) io.stderr:write(message, "\n") end
local unpack = _VERSION == "Lua 5.1" and "unpack" or "table.unpack"
slurm.log_error = (loadstring or load)("slurm.error (string.format(" .. unpack .. "({...})))")
slurm.log_info = (loadstring or load)("slurm.log (0, string.format(" .. unpack .. "({...})))")
"""


def missing(what: str) -> NoReturn:
    """Fails the test under CI=true, skips it elsewhere: `what` names the missing part (a Lua,
    its liblua or lua-socket)."""
    message = f"{what} (scripts/install-system-deps installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


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
