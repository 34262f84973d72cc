"""What users' dacctl commands answer (status, pools, buffers, show, create-persistent,
destroy-persistent), and the one set of rules that scopes them to the caller's own buffers.

Two paths reach `answer`: dacctl itself, for root and admins, who read etcd with their own
credential; and dac's user service (dacservice.users), for everyone else, with the uid
and gid munge verified. Both pass the caller's rights (daccore.services.admin.rights) the same way,
so what a user sees cannot depend on the path. Every answer is a plain JSON-ready dict: the service
sends it as it is, and dacctl prints it the same whichever path it came by.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from daccore.errors import NotFound, UserError
from daccore.escape import printable
from daccore.services import injob

if TYPE_CHECKING:
    from daccore.records.models import Buffer
    from daccore.settings.cache import Json
    from daccore.settings.config import DacConfig
    from daccore.store import Store

__all__ = ["Caller", "VERBS", "REQUIRED", "answer", "check_args"]


@dataclass(frozen=True)
class Caller:
    """Who asks: `rights` is `daccore.services.admin.rights` of uid (0 for root and admins);
    `origin` the address munged wrote into the credential (ENCODE_HOST), '' when the caller
    came by no credential (root's and admins' own dacctl)."""

    uid: int
    gid: int
    rights: int
    origin: str = ""


#: a buffer's or pool's name, as daccore.records.models.Name: nothing else may reach a store key
_NAME = (str, re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"))
_WORD = (str, re.compile(r"^[a-z_,]{1,64}$"))  # a state, access mode or type: its rule checks it
_INT = (int, None)

#: verb -> its arguments and their types; every argument may be None (not given).
VERBS: dict[str, dict[str, tuple[type[Any], re.Pattern[str] | None]]] = {
    "status": {"buffer": _NAME},
    "pools": {},
    "buffers": {"owner_uid": _INT, "state": _WORD, "pool": _NAME},
    "show": {"buffer": _NAME},
    "create-persistent": {
        "name": _NAME,
        "capacity": _INT,
        "pool": _NAME,
        "access": _WORD,
        "type": _WORD,
        "owner_uid": _INT,
        "owner_gid": _INT,
    },
    "destroy-persistent": {"name": _NAME},
    **injob.ARGS,  # stages a running job asks for (daccore.services.injob)
}
#: verb -> the arguments it cannot do without (the handlers of the others say what they lack)
REQUIRED: dict[str, tuple[str, ...]] = {
    "status": ("buffer",),
    "show": ("buffer",),
    **injob.REQUIRED,
}
#: the most items a list argument (stage-wait's ids) holds
MAX_LIST = 1000


def check_args(verb: object, args: object) -> dict[str, Any]:
    """`args` if they are exactly what `verb` takes, each of its type, none it needs left out;
    else a UserError. A request is JSON anyone can write: whatever it holds, a handler gets
    only values of the types it declares."""
    if not isinstance(verb, str) or verb not in VERBS:
        shown = printable(str(verb)[:40])
        raise UserError(f"unknown request '{shown}' (requests: {', '.join(VERBS)})")
    if not isinstance(args, dict) or set(args) - set(VERBS[verb]):
        raise UserError(f"{verb}: arguments must be some of: {', '.join(VERBS[verb]) or 'none'}")
    for key, (kind, pattern) in VERBS[verb].items():
        value = args.get(key)
        if value is None:
            continue
        if not _of_type(value, kind):
            what = f"list of at most {MAX_LIST} ids" if kind is list else kind.__name__
            raise UserError(f"{verb}: argument '{key}' is not a valid {what}")
        if pattern and not pattern.fullmatch(value):
            raise UserError(
                f"{verb}: argument '{key}' is not a valid name (letters, digits, "
                "_ . : - and at most 128 of them)"
            )
    missing = [k for k in REQUIRED.get(verb, ()) if args.get(k) is None]
    if missing:
        raise UserError(f"{verb}: argument '{missing[0]}' is missing")
    return {k: args.get(k) for k in VERBS[verb]}


def _of_type(value: object, kind: type[Any]) -> bool:
    """`value` is of `kind` exactly (True is no int); an int one of 63 bits, never negative; a
    list (stage-wait's ids, the one kind of list) of at most MAX_LIST such ints."""
    if type(value) is not kind:
        return False
    if kind is int:
        return isinstance(value, int) and 0 <= value < 1 << 63
    if kind is list:
        return (
            isinstance(value, list)
            and len(value) <= MAX_LIST
            and all(_of_type(i, int) for i in value)
        )
    return True


def answer(store: Store, config: DacConfig, caller: Caller, verb: object, args: object) -> Json:
    """The answer to `verb` for `caller` (both as a request decoded them: checked here); a
    DacError when refused."""
    a = check_args(verb, args)
    return _HANDLERS[str(verb)](store, config, caller, **a)


def _mine(store: Store, caller: Caller, name: str) -> Buffer:
    from daccore.services.admin_views import visible

    current = store.buffer(name)
    if current is None or not visible(caller.rights, current.record):
        raise NotFound(f"no buffer '{name}' of yours (a job id or a persistent buffer's name)")
    buf: Buffer = current.record
    return buf


def _status(store: Store, config: DacConfig, caller: Caller, buffer: str) -> Json:
    from daccore.records.status_view import view

    return view(_mine(store, caller, buffer), store.statuses(buffer))


def _pools(store: Store, config: DacConfig, caller: Caller) -> Json:
    from daccore.rules.inventory import summarize

    return {"pools": [s.as_dict() for s in summarize(store.summary_inventory())]}


def _buffers(
    store: Store,
    config: DacConfig,
    caller: Caller,
    owner_uid: int | None,
    state: str | None,
    pool: str | None,
) -> Json:
    from daccore.services.admin_views import STATES, buffer_rows

    if state is not None and state not in STATES:
        raise UserError(f"no state '{state}' (states: {', '.join(STATES)})")
    return {
        "buffers": buffer_rows(
            store.buffers().values(),
            store.statuses,
            caller.rights,
            owner_uid=owner_uid,
            state=state,
            pool=pool,
        )
    }


def _show(store: Store, config: DacConfig, caller: Caller, buffer: str) -> Json:
    from daccore.services.admin_views import buffer_detail

    return buffer_detail(_mine(store, caller, buffer), store.statuses(buffer))


def _create(
    store: Store,
    config: DacConfig,
    caller: Caller,
    name: str | None,
    capacity: int | None,
    pool: str | None,
    access: str | None,
    type: str | None,
    owner_uid: int | None,
    owner_gid: int | None,
) -> Json:
    from daccore.services import admin

    if name is None or capacity is None or capacity <= 0:
        raise UserError("create-persistent: give a name and a capacity greater than zero")
    buf = admin.create_persistent(
        store,
        config,
        name,
        capacity,
        pool,
        access or "striped",
        type or "scratch",
        (caller.uid, caller.gid),
        (owner_uid, owner_gid),
        admin=caller.rights == 0,
    )
    return {
        "name": buf.name,
        "size": buf.allocation.size,
        "pool": buf.request.pool,
        "hosts": buf.allocation.hosts,
    }


def _destroy(store: Store, config: DacConfig, caller: Caller, name: str | None) -> Json:
    from daccore.services import admin

    if name is None:
        raise UserError("destroy-persistent: give the buffer's name")
    admin.destroy_persistent(store, config, name, caller.rights)
    return {"name": name}


_HANDLERS: dict[str, Callable[..., Json]] = {
    "status": _status,
    "pools": _pools,
    "buffers": _buffers,
    "show": _show,
    "create-persistent": _create,
    "destroy-persistent": _destroy,
    **injob.HANDLERS,
}
