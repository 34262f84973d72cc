"""Typed errors that say who must act.

    DacError                      kind: user | admin | internal
    ├── UserError                 the request is wrong; the user fixes it
    │   ├── CapacityError         no room for the request (room may free up)
    │   └── NotFound              a named object does not exist
    ├── AdminError                the site's setup is wrong or down; an admin fixes it
    │   ├── ConfigError           the config file or environment is invalid
    │   ├── StoreUnavailable      etcd cannot be reached
    │   ├── NoCredential          this account cannot read the etcd credential it needs
    │   └── PlaybookFailed        a lifecycle step's playbook failed on a storage host
    └── InternalError             a bug or a broken invariant in dac itself
        └── Conflict              a compare-and-swap lost a race (re-read and try again)
            └── Superseded        the buffer acted on was deleted or created anew meanwhile

Messages are one lower-case line that names the object and, where there is one, the fix.
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """Who must act on an error."""

    USER = "user"
    ADMIN = "admin"
    INTERNAL = "internal"


class DacError(Exception):
    """Base of every error dac raises on purpose."""

    kind: Kind = Kind.INTERNAL
    #: process exit code a CLI uses for this kind of error
    exit_code: int = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UserError(DacError):
    kind = Kind.USER


class CapacityError(UserError):
    """No room for the request now; room may free up."""


class NotFound(UserError):
    pass


class AdminError(DacError):
    kind = Kind.ADMIN
    exit_code = 2


class ConfigError(AdminError):
    def __init__(self, source: str, message: str):
        super().__init__(f"invalid config {source}: {message}")
        self.source = source


class StoreUnavailable(AdminError):
    def __init__(self, endpoints: list[str], reason: str, waited: float):
        where = ", ".join(endpoints)
        super().__init__(
            f"etcd unreachable at {where} after {waited:.1f}s: {reason} "
            "(check DAC_ETCD_ENDPOINTS, ETCDCTL_ENDPOINTS or etcd.endpoints in the config)"
        )
        self.endpoints = endpoints


class Fenced(AdminError):
    """A dacd whose lease lapsed (frozen, cut off from etcd) tried to act on a buffer: it acts
    on none until it holds a lease again and has listed its buffers anew."""

    def __init__(self, host: str):
        super().__init__(f"host {host}: this dacd's lease lapsed; it acts on no buffer until "
                         "it has registered again (it does so by itself once etcd answers)")
        self.host = host


class NoCredential(AdminError):
    def __init__(self, path: str, role: str, reason: str):
        holder = {"dacd": "root on storage servers", "slurm": "the Slurm controller's SlurmUser",
                  "admin": "root on admin hosts"}.get(role, "the account that runs it")
        super().__init__(
            f"cannot read the etcd credential {path} ({reason}): the '{role}' credential is for "
            f"{holder}; run this as that account, or an admin must create the file "
            "(docs/security.md, 'What a site must set up')")
        self.path, self.role = path, role


class BadRecord(AdminError):
    """A record in etcd that is not what dac's writers write (not JSON, a field missing or of
    another type): something else wrote it, and an admin must fix or delete it."""

    def __init__(self, key: str, model: str, reason: str):
        super().__init__(f"record at {key} is not a valid {model}: {reason}; an admin must fix "
                         "or delete it")
        self.key = key


class PlaybookFailed(AdminError):
    def __init__(self, step: str, task: str, host: str, rc: int, output: str):
        tail = output.strip().splitlines()[-1] if output.strip() else "no output"
        super().__init__(f"{step} failed on {host} at task '{task}' (rc {rc}): {tail[:300]}")
        self.step, self.task, self.host, self.rc = step, task, host, rc
        self.output = output[-8000:]  # bounded: kept in the buffer's status for the admin


class InternalError(DacError):
    kind = Kind.INTERNAL
    exit_code = 3


class Conflict(InternalError):
    """A compare-and-swap lost a race: re-read and try again."""


class Superseded(Conflict):
    """A dacd's status write for a buffer that was deleted, or deleted and created anew under
    the same name (Slurm sets a job's buffer up again after a slurmctld restart), since the
    dacd read it: nothing is written, and the step for the old buffer goes no further."""

    def __init__(self, name: str):
        super().__init__(f"buffer {name}: deleted or created anew while this host acted on it; "
                         "its status was not written")
        self.name = name
