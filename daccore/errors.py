"""Typed errors that say who must act.

    DacError                      kind: user | admin | internal
    ├── UserError                 the request is wrong; the user fixes it
    │   ├── CapacityError         no room for the request (room may free up)
    │   └── NotFound              a named object does not exist
    ├── AdminError                the site's setup is wrong or down; an admin fixes it
    │   ├── ConfigError           the config file or environment is invalid
    │   ├── StoreUnavailable      etcd cannot be reached
    │   ├── Fenced                a dacd whose lease lapsed tried to act on a buffer
    │   ├── NoCredential          this account cannot read the etcd credential it needs
    │   ├── BadRecord             a record in etcd is not what dac's writers write
    │   └── PlaybookFailed        a lifecycle step's playbook failed on a storage host
    │       └── HostsUnreachable  ... because hosts did not answer over ssh
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
        super().__init__(
            f"host {host}: this dacd's lease lapsed; it acts on no buffer until "
            "it has registered again (it does so by itself once etcd answers)"
        )
        self.host = host


class NoCredential(AdminError):
    def __init__(self, path: str, role: str, reason: str):
        holder = {
            "dacd": "root on storage servers",
            "slurm": "the Slurm controller's SlurmUser",
            "admin": "root on admin hosts",
        }.get(role, "the account that runs it")
        super().__init__(
            f"cannot read the etcd credential {path} ({reason}): the '{role}' credential is for "
            f"{holder}; run this as that account, or an admin must create the file "
            "(docs/security.md, 'What a site must set up')"
        )
        self.path, self.role = path, role


class BadRecord(AdminError):
    """A record in etcd that is not what dac's writers write (not JSON, a field missing or of
    another type): something else wrote it, and an admin must fix or delete it."""

    def __init__(self, key: str, model: str, reason: str):
        super().__init__(
            f"record at {key} is not a valid {model}: {reason}; an admin must fix or delete it"
        )
        self.key = key


class PlaybookFailed(AdminError):
    """A task failed on `host`; `node`: a compute node, which Slurm takes out of service."""

    def __init__(self, step: str, task: str, host: str, rc: int, output: str, node: bool = False):
        tail = output.strip().splitlines()[-1] if output.strip() else "no output"
        fix = (
            (
                f"; an admin must fix {host} or take it out of service (scontrol update "
                f"nodename={host} state=down)"
            )
            if node
            else ""
        )
        super().__init__(
            f"{step} failed on {host} at task '{task}' (rc {rc}): {clipped(tail, TAIL_MAX)}{fix}"
        )
        self.step, self.task, self.host, self.rc = step, task, host, rc
        self.output = output[-8000:]  # bounded: kept in the buffer's status for the admin


class HostsUnreachable(PlaybookFailed):
    """A step met hosts that did not answer over ssh (down, cut off, a host key refused).
    `touched`: the hosts that ran at least one task of the step (any of them may have done
    part of it; the others did nothing); `rest_done`: every host that answered ran the whole
    step; `servers`: the step's storage servers (and MGS), whose remedy is dac's drain, not
    Slurm's."""

    def __init__(
        self,
        step: str,
        origin: str,
        reasons: dict[str, str],
        known_hosts: str,
        touched: frozenset[str] = frozenset(),
        rest_done: bool = False,
        servers: frozenset[str] = frozenset(),
    ):
        hosts = sorted(reasons)
        named = ", ".join(hosts)
        why = _ssh_words(reasons[hosts[0]])
        if any(_key_refused(r) for r in reasons.values()):
            fix = (
                f"an admin must check {named} and put its current host key in {known_hosts} "
                "(docs/admin.md, 'Host keys')"
            )
        else:
            them = "it" if len(hosts) == 1 else "them"
            fix = (
                f"an admin must bring {named} back, or take {them} out of service "
                f"({_out_of_service(hosts, servers)})"
            )
        AdminError.__init__(
            self, f"{step} failed on {origin}: {named} unreachable over ssh ({why}); {fix}"
        )
        self.step, self.task, self.host, self.rc = step, "(connect)", hosts[0], 255
        # rest_done: every other host ran the whole step (no task failed, nothing cut short)
        self.hosts, self.touched, self.rest_done = hosts, touched, rest_done
        self.output = "\n".join(f"{h}: {reasons[h]}" for h in hosts)[-8000:]


#: how much of a failed task's last line goes into its one-line error (`PlaybookFailed`)
TAIL_MAX = 700
_CUT = " [...] "


def clipped(text: str, limit: int) -> str:
    """`text`, at most `limit` characters, a longer one cut in its middle: dac's messages end
    with who must act and what was kept ("an admin must end them; nothing was zeroed or
    released"), and the paths or holders listed before must not cut that off."""
    if len(text) <= limit:
        return text
    keep = limit - len(_CUT)
    return text[: keep - keep // 3] + _CUT + text[len(text) - keep // 3 :]


def _out_of_service(hosts: list[str], servers: frozenset[str]) -> str:
    """How each kind of host among `hosts` leaves service: a server by dac, a node by Slurm."""
    down = [h for h in hosts if h in servers]
    ways = []
    if down:
        ways.append(f"a storage server: dacctl drain {down[0] if len(down) == 1 else '<host>'}")
    if len(down) < len(hosts):
        ways.append("a compute node: scontrol update nodename=<node> state=down")
    return "; ".join(ways)


def _key_refused(reason: str) -> bool:
    reason = reason.lower()
    return "host key verification failed" in reason or "identification has changed" in reason


def _ssh_words(reason: str, limit: int = 200) -> str:
    """ssh's own last words in Ansible's message ("Host key verification failed.", "ssh:
    connect to host … Connection timed out"), without Ansible's wrapping."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    last = lines[-1] if lines else "no answer"
    for lead in ("via ssh: ", "reached over ssh: ", "Task failed: "):
        last = last.split(lead, 1)[-1]
    return last[:limit]


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
        super().__init__(
            f"buffer {name}: deleted or created anew while this host acted on it; "
            "its status was not written"
        )
        self.name = name
