"""Who dac is to etcd: a role's user name and password, exchanged once for a token.

etcd's JSON gateway (the `http` transport) takes no identity from a client certificate: since
CVE-2018-16886 it ignores the certificate's CN, and refuses a certificate that has one. So with
etcd's RBAC on, every caller authenticates with a user name and password
(`/v3/auth/authenticate`, or gRPC's Auth.Authenticate) and sends the token it gets with each
request. Authenticating costs ~77 ms (etcd checks the password with bcrypt), more than a whole
Slurm hook may take, so a token is reused: held in memory by a long-lived process, and, for the
short-lived hooks (`cache=True`), in a 0600 file of the caller's cache directory
(`config_cache.cache_dir`). A request refused for its token (expired, or issued before a change
to etcd's users and roles) authenticates once more and is retried once.

A credential file is `<etcd.credentials_dir>/<role>`, one line `<user>:<password>` (the syntax
of etcdctl's --user), readable only by the account that acts in that role (docs/security.md).
"""

from __future__ import annotations

import json
import os
import stat
import threading

from daccore.errors import AdminError, NoCredential
from daccore.etcd.types import EtcdRequestError, Unreachable

#: What etcd answers a login it cannot serve now (no leader, a raft proposal timed out), as
#: its gateway reports it with code 2 (Unknown) rather than as unavailable.
_CANNOT_SERVE = (
    "deadline exceeded",
    "timed out",
    "no leader",
    "leader changed",
    "too many requests",
)

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from typing import Callable, TypeVar

    T = TypeVar("T")

__all__ = ["ROLES", "Credential", "token_rejected"]

#: dacd: storage servers; slurm: the Slurm controller's hooks (and the user service);
#: admin: root on admin hosts. docs/security.md lists what each may write.
ROLES = ("dacd", "slurm", "admin")


def token_rejected(code: int | None, message: str) -> bool:
    """etcd refused a request for its token, not for what it asked: authenticate again.
    16 (UNAUTHENTICATED): "invalid auth token", an expired or unknown token; "revision of auth
    store is old": the token predates a change to etcd's users or roles."""
    return code == 16 or "invalid auth token" in message or "auth store is old" in message


class Credential:
    """One role's credential file and the tokens it earned, one per endpoint (etcd's simple
    tokens are known only to the member that issued them). Thread-safe; no I/O until used."""

    def __init__(self, path: str, role: str, cache: bool = False):
        self.path, self.role, self.cache = path, role, cache
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()

    def call(
        self, endpoint: str, authenticate: Callable[[str, str], str], fn: Callable[[str], T]
    ) -> T:
        """`fn(token)`; once more with a fresh token if etcd rejected the token."""
        token = self._token(endpoint, authenticate)
        try:
            return fn(token)
        except EtcdRequestError as e:
            if not token_rejected(e.code, e.reason):
                raise
        return fn(self.renew(endpoint, token, authenticate))

    def _token(self, endpoint: str, authenticate: Callable[[str, str], str]) -> str:
        token = self._tokens.get(endpoint)
        if token:
            return token
        with self._lock:
            token = self._tokens.get(endpoint)
            if not token and self.cache:
                token = self._read_cache().get(endpoint)
            if not token:
                token = self._authenticate(endpoint, authenticate)
            self._tokens[endpoint] = token
            return token

    def renew(self, endpoint: str, stale: str, authenticate: Callable[[str, str], str]) -> str:
        """A fresh token, unless another thread already replaced `stale`."""
        with self._lock:
            token = self._tokens.get(endpoint)
            if not token or token == stale:
                token = self._tokens[endpoint] = self._authenticate(endpoint, authenticate)
            return token

    def secret(self) -> tuple[str, str]:
        """(user, password) from the file; NoCredential when this account cannot read it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise NoCredential(self.path, self.role, (e.strerror or str(e)).lower()) from None
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            user, colon, password = f.read().rstrip("\r\n").partition(":")
        if not (user and colon and password):
            raise NoCredential(self.path, self.role, "not one line <user>:<password>")
        return user, password

    def _authenticate(self, endpoint: str, authenticate: Callable[[str, str], str]) -> str:
        user, password = self.secret()
        try:
            token = authenticate(user, password)
        except EtcdRequestError as e:
            if any(m in e.reason.lower() for m in _CANNOT_SERVE):
                # a member that cannot reach its leader (quorum lost) times the login out:
                # etcd out of reach, for the client to fail over and back off, not a refusal
                raise Unreachable(e.reason) from None
            raise AdminError(
                f"etcd at {endpoint} refused user '{user}' of {self.path}: "
                f"{e.reason}; an admin must make the file match that etcd user "
                "(docs/security.md)"
            ) from None
        if self.cache:
            self._write_cache(endpoint, token)
        return token

    # -- the token cache of short-lived processes ---------------------------------------------

    def _identity(self) -> list[object] | None:
        """The credential file's identity: a token cached under another file (or an edited
        one) is not served. Stat needs only the directory's search permission, so an account
        without it learns so here, before any network round trip."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise NoCredential(self.path, self.role, (e.strerror or str(e)).lower()) from None
        return [os.path.abspath(self.path), st.st_ino, st.st_size, st.st_mtime_ns]

    def _cache_file(self) -> str | None:
        import hashlib

        from daccore.settings.cache import cache_dir

        d = cache_dir()
        if d is None:
            return None
        digest = hashlib.sha1(f"{self.role}\0{os.path.abspath(self.path)}".encode()).hexdigest()
        return os.path.join(d, f"etcd-token-{digest[:16]}.json")

    def _read_cache(self) -> dict[str, str]:
        identity = self._identity()
        cache = self._cache_file()
        if cache is None:
            return {}
        try:
            fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return {}
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            # a token is a bearer secret: never use one others could have read or planted
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                return {}
            try:
                cached = json.loads(f.read())
            except ValueError:
                return {}
        if not isinstance(cached, dict) or cached.get("credential") != identity:
            return {}
        tokens = cached.get("tokens")
        if not isinstance(tokens, dict):
            return {}
        # a token goes into an HTTP header as it is: nothing that could end the line
        return {
            e: t
            for e, t in tokens.items()
            if isinstance(t, str) and t.isprintable() and " " not in t
        }

    def _write_cache(self, endpoint: str, token: str) -> None:
        cache = self._cache_file()
        if cache is None:
            return
        tokens = {**self._read_cache(), endpoint: token}
        from daccore.settings.cache import write_private_json

        write_private_json(cache, {"credential": self._identity(), "tokens": tokens})
