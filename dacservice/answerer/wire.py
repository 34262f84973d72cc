"""The answerer's wire protocol, both ends: a request read off the socket (`read_request`),
and `ask`, what burst_buffer.lua does, in Python (tests, bench).

One request per connection. Request: one line, `dac-answer/1 <function> <arg>...`, each word
percent-encoded (every byte but letters, digits and `-._/:=,` as %XX). `dac-answer/2` is /1
with one word more after the function (MAGIC_CARRYING; an answerer of /1 alone refuses it, and
the hook forks dacctl, so a burst_buffer.lua newer than the running answerer loses nothing).
`job_process` may carry its job script: `dac-answer/2 job_process script:<n> <arg>...`, the
line then the script's n bytes (at most MAX_SCRIPT), as the caller read them from --job's
path; the answer is built from them and no file is opened (burst_buffer.lua reads the file
itself: slurmctld's own, in its StateSaveLocation), and a valid answer can be kept by those
bytes (answers.py, VALID_KEPT). `paths` may ask for its path file's lines in the reply instead
of written: `dac-answer/2 paths reply:pathfile <arg>...` (--pathfile's name is still checked
to be Slurm's for the job; burst_buffer.lua writes the lines into slurmctld's own file, and
asks again without it when it cannot).
`bbstat` (issue 45) answers what `dac-bbstat` prints for `scontrol show bbstat` and `scontrol
show dwstat`, with the word after the function naming the caller as Slurm named it:
`dac-answer/2 bbstat caller:<uid>:<gid> <word>...` (burst_buffer.lua on Slurm 23.02+), or
`caller:` alone where Slurm names no one (22.05, burst_buffer/datawarp's forwarder); the
words are the user's, as dac-bbstat would get them (an empty one sent as `%00`: a line cannot
carry an empty last word, and no argv word holds a NUL). The reply is dac-bbstat's stdout,
exit 0, byte for byte (daccore/services/bbstat.py `answer`); a `dac-answer/1 bbstat` is refused,
as an answerer older than bbstat refuses both, and the caller forks dac-bbstat. The caller's uid
is believed as DAC_BBSTAT_CALLER is: only root and SlurmUser may ask (server.py), and
slurmctld names it.
Reply, then the close:
  `ANSWER <exit status> <n>\\n` then dacctl's stdout (n bytes), then its stderr;
  `REFUSE <reason>\\n`: the caller forks dacctl.
`dac-answer/1 stats` answers `ANSWER 0 <n>\\n` and a JSON object of counters.
"""

from __future__ import annotations

import socket
import urllib.parse
from typing import Any, NamedTuple

__all__ = [
    "Request",
    "read_request",
    "ask",
    "encode",
    "decode",
    "SOCKET",
    "MAGIC",
    "MAGIC_CARRYING",
    "READ_TIMEOUT",
    "MAX_LINE",
    "MAX_SCRIPT",
    "BBSTAT",
]

#: where burst_buffer.lua looks unless DAC_ANSWERER_SOCKET says otherwise
SOCKET = "/run/dac-answerer/socket"
MAGIC = "dac-answer/1"
MAGIC_CARRYING = "dac-answer/2"
#: seconds a client has to send its line (slurmctld sends it at once)
READ_TIMEOUT = 1.0
MAX_LINE = 65536
#: the largest job script a request may carry (burst_buffer.lua's MAX_SCRIPT): a larger one is
#: read by the answer from --job's path, as the forked dacctl reads it
MAX_SCRIPT = 65536
SCRIPT_WORD = "script:"
PATHFILE_WORD = "reply:pathfile"
#: bbstat's word after the function: `caller:<uid>:<gid>`, or `caller:` for no one named
CALLER_WORD = "caller:"
BBSTAT = "bbstat"


class Request(NamedTuple):
    """A request as read: its function, its other words decoded, and what it carried."""

    function: str
    args: list[str]
    script: bytes | None  # job_process's script
    pathfile_reply: bool  # paths's lines asked for in the reply
    caller: str | None  # bbstat's caller, DAC_BBSTAT_CALLER's form


def encode(word: str) -> str:
    return urllib.parse.quote(word, safe="-._/:=,")


def decode(word: str) -> str:
    """A request's word: percent-decoded where it holds an escape (most words hold none)."""
    return urllib.parse.unquote(word) if "%" in word else word


def read_request(sock: socket.socket) -> Request | bytes:
    """The request `sock` sends (READ_TIMEOUT already set on it), or the REFUSE line its
    shape earns (module docstring)."""
    line, rest = _read_line(sock)
    words = line.split(" ")
    if words[0] not in (MAGIC, MAGIC_CARRYING) or len(words) < 2:
        return b"REFUSE not a dac-answer/1 or /2 request\n"
    function, script, pathfile_reply, caller = words[1], None, False, None
    carrying = words[0] == MAGIC_CARRYING and len(words) > 2
    if carrying and words[2].startswith(CALLER_WORD):
        if function != BBSTAT:
            return b"REFUSE only bbstat names its caller\n"
        caller = decode(words[2][len(CALLER_WORD) :])
        del words[2]
    elif carrying and words[2] == PATHFILE_WORD:
        if function != "paths":
            return b"REFUSE only paths replies with its path file's lines\n"
        pathfile_reply = True
        del words[2]
    elif carrying and words[2].startswith(SCRIPT_WORD):
        n = words[2][len(SCRIPT_WORD) :]
        if function != "job_process" or not n.isdigit() or int(n) > MAX_SCRIPT:
            return b"REFUSE only job_process carries a script, of at most %d bytes\n" % (MAX_SCRIPT)
        script = _read_bytes(sock, rest, int(n))
        if script is None:
            return b"REFUSE a job script cut short\n"
        del words[2]
    return Request(function, [decode(w) for w in words[2:]], script, pathfile_reply, caller)


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
    carried += [] if caller is None else [CALLER_WORD + encode(caller)]
    magic = MAGIC_CARRYING if carried else MAGIC
    if caller is not None:  # bbstat's words: an empty one as NUL, as burst_buffer.lua sends it
        args = ["\0" if a == "" else a for a in args]
    line = " ".join([magic, function, *carried, *(encode(a) for a in args)]) + "\n"
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
