"""munge credentials made and checked in-process, through libmunge (libmunge.so.2, Debian's
libmunge2: present wherever munge is), instead of running the `munge` and `unmunge`
programs: a fork and an exec each per request saved on both ends of dac's user service
(docs/performance.md, in-job stages).

`encode(payload, socket_path)` is what `munge -s PAYLOAD` prints; `decode(credential,
socket_path)` is what `unmunge` reports: (uid, gid, origin, payload), origin being the IPv4
address munged wrote into the credential (unmunge's ENCODE_HOST), or a MungeRefused naming
munge's reason ("Replayed credential", "Invalid credential", ...). Both raise MungeUnreachable
with munge's own line when munged cannot be reached.

`available()` is False when libmunge cannot be loaded (or DAC_LIBMUNGE is set to `none`,
which tests use to take the other path): then callers run the programs, as before
(daccore.services.user_client.run_munge). DAC_LIBMUNGE may also name another library file.

`well_formed(credential)` looks at a credential's shape alone, without munged: the user
service refuses a line that is not shaped like one before it costs an unmunge.

Each call makes and destroys its own munge context, as libmunge asks of threads (the user
service decodes in many at once); ctypes lets go of the GIL for the call. Buffers libmunge
hands back are freed with libc's free, as its manual says.
"""

from __future__ import annotations

import os
import socket

TYPE_CHECKING = False  # typing's own, without importing typing on a user's command
if TYPE_CHECKING:
    import ctypes

__all__ = [
    "available",
    "encode",
    "decode",
    "well_formed",
    "MungeError",
    "MungeRefused",
    "MungeUnreachable",
    "LIBRARY",
]

#: the library's soname (Debian's libmunge2); DAC_LIBMUNGE overrides it, `none` disables it
LIBRARY = "libmunge.so.2"

# munge.h
_OPT_ADDR4 = 5
_OPT_SOCKET = 8
_EMUNGE_SOCKET = 6
#: errors that say munged could not be asked, not that the credential is bad
_UNREACHABLE = {1, 5, _EMUNGE_SOCKET, 7}  # SNAFU, NO_MEMORY, SOCKET, TIMEOUT
#: munged's armour (src/munged/dec.c, dec_unarmor): the prefix, padded base64, the suffix
_PREFIX, _SUFFIX = b"MUNGE:", b":"
#: the first decoded byte: the credential format's version, 3 since munge 0.5
_CRED_VERSION = 3
#: decoded bytes of any credential, at least: the outer header (5), the smallest MAC (MD5, 16)
#: and something sealed (the salt and the fields around the payload, maybe compressed)
_SMALLEST = 22


class MungeError(Exception):
    """munge's one line, and its error number (munge.h's munge_err_t)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class MungeRefused(MungeError):
    """munged refused the credential (bad, altered, replayed, expired, another key)."""


class MungeUnreachable(MungeError):
    """munged could not be asked (no socket, not running, out of memory)."""


class _Lib:
    def __init__(self, lib: ctypes.CDLL, libc: ctypes.CDLL):
        import ctypes as c

        self.lib, self.free = lib, libc.free
        self.free.argtypes, self.free.restype = [c.c_void_p], None
        lib.munge_ctx_create.argtypes, lib.munge_ctx_create.restype = [], c.c_void_p
        lib.munge_ctx_destroy.argtypes, lib.munge_ctx_destroy.restype = [c.c_void_p], None
        lib.munge_ctx_strerror.argtypes = [c.c_void_p]
        lib.munge_ctx_strerror.restype = c.c_char_p
        lib.munge_strerror.argtypes, lib.munge_strerror.restype = [c.c_int], c.c_char_p
        # munge_ctx_set and munge_ctx_get are variadic: their arguments are typed per call
        lib.munge_ctx_set.restype = lib.munge_ctx_get.restype = c.c_int
        lib.munge_encode.argtypes = [
            c.POINTER(c.c_void_p),
            c.c_void_p,
            c.c_char_p,
            c.c_int,
        ]
        lib.munge_encode.restype = c.c_int
        lib.munge_decode.argtypes = [
            c.c_char_p,
            c.c_void_p,
            c.POINTER(c.c_void_p),
            c.POINTER(c.c_int),
            c.POINTER(c.c_uint32),
            c.POINTER(c.c_uint32),
        ]
        lib.munge_decode.restype = c.c_int

    def context(self, socket_path: str) -> int:
        import ctypes as c

        ctx = self.lib.munge_ctx_create()
        if not ctx:
            raise MungeUnreachable("out of memory for a munge context", 5)
        if socket_path:
            e = self.lib.munge_ctx_set(
                c.c_void_p(ctx), c.c_int(_OPT_SOCKET), c.c_char_p(os.fsencode(socket_path))
            )
            if e:
                why = self.why(ctx, e)
                self.lib.munge_ctx_destroy(ctx)
                raise MungeUnreachable(why, e)
        return int(ctx)

    def why(self, ctx: int | None, e: int) -> str:
        text = self.lib.munge_ctx_strerror(ctx) if ctx else None
        text = text or self.lib.munge_strerror(e) or b"munge error %d" % e
        return " ".join(bytes(text).decode(errors="replace").split())


_LOADED: list[_Lib | None] = []


def _lib() -> _Lib | None:
    if not _LOADED:
        name = os.environ.get("DAC_LIBMUNGE", "") or LIBRARY
        lib = None
        if name != "none":
            try:
                import ctypes

                lib = _Lib(ctypes.CDLL(name), ctypes.CDLL(None))
            except (OSError, AttributeError):  # not installed, or not libmunge
                lib = None
        _LOADED.append(lib)
    return _LOADED[0]


def available() -> bool:
    """Whether libmunge is loaded here (else the caller runs `munge`/`unmunge`)."""
    return _lib() is not None


def encode(payload: bytes, socket_path: str = "") -> bytes:
    """A credential ("MUNGE:...:") for `payload`, for this process's uid and gid."""
    lib = _lib()
    if lib is None:
        raise MungeUnreachable("libmunge is not loaded", 1)
    import ctypes as c

    ctx = lib.context(socket_path)
    cred = c.c_void_p()
    try:
        e = lib.lib.munge_encode(c.byref(cred), ctx, payload, len(payload))
        if e or not cred.value:
            raise MungeUnreachable(lib.why(ctx, e or 1), e or 1)
        return c.string_at(cred.value)
    finally:
        if cred.value:
            lib.free(cred.value)
        lib.lib.munge_ctx_destroy(ctx)


def well_formed(credential: bytes) -> bool:
    """Whether `credential` is shaped like one munged makes: `MUNGE:`, padded base64 of at least
    the smallest credential starting with the format's version, `:`. A cheap look, no munged
    and no libmunge: a line that fails it is refused without a round trip; one that passes may
    still be forged, which only munged can tell."""
    import base64  # the service's alone: users' dacctl never imports it for this

    body = credential[len(_PREFIX) : -len(_SUFFIX)]
    if not credential.startswith(_PREFIX) or not credential.endswith(_SUFFIX):
        return False
    try:
        raw = base64.b64decode(body, validate=True)
    except ValueError:  # binascii.Error: not base64, or not padded as munged pads it
        return False
    return len(raw) >= _SMALLEST and raw[0] == _CRED_VERSION


def decode(credential: bytes, socket_path: str = "") -> tuple[int, int, str, bytes]:
    """(uid, gid, origin, payload) of a credential munged verified; MungeRefused when it
    refuses it, MungeUnreachable when it cannot be asked."""
    lib = _lib()
    if lib is None:
        raise MungeUnreachable("libmunge is not loaded", 1)
    if b"\0" in credential:  # C would read up to the NUL: nothing of it may be left unchecked
        raise MungeRefused(lib.why(None, 8), 8)  # EMUNGE_BAD_CRED
    import ctypes as c

    ctx = lib.context(socket_path)
    buf, size = c.c_void_p(), c.c_int(0)
    uid, gid = c.c_uint32(), c.c_uint32()
    try:
        e = lib.lib.munge_decode(
            credential, ctx, c.byref(buf), c.byref(size), c.byref(uid), c.byref(gid)
        )
        if e:
            kind = MungeUnreachable if e in _UNREACHABLE else MungeRefused
            # munge_strerror's words, as unmunge's STATUS line gives them; the context's
            # detail only when munged was not reached (it names the socket)
            raise kind(lib.why(ctx if kind is MungeUnreachable else None, e), e)
        addr = (c.c_ubyte * 4)()
        origin = ""
        if lib.lib.munge_ctx_get(c.c_void_p(ctx), c.c_int(_OPT_ADDR4), addr) == 0:
            origin = socket.inet_ntoa(bytes(addr))
        payload = c.string_at(buf.value, size.value) if buf.value and size.value > 0 else b""
        return uid.value, gid.value, origin, payload
    finally:
        if buf.value:
            lib.free(buf.value)
        lib.lib.munge_ctx_destroy(ctx)
