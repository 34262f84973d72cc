"""What `scontrol show bbstat` and `scontrol show dwstat` print (`answer`), for dac-bbstat
(dacctl/bbstat.py) and for dac's answerer (dacservice/answerer/answers.py), which gives
burst_buffer.lua's `slurm_bb_get_status` and the datawarp forwarder (slurm-plugin/dwstat.lua)
the same bytes without a process started per call (issue 45: a loop of `scontrol show bbstat`
forked one per call while slurmctld held its burst-buffer lock).

Slurm runs dac-bbstat as SlurmUser with words a user typed: burst_buffer/datawarp as
`GetSysStatus` (with everything after `scontrol show bbstat` or `scontrol show dwstat`),
burst_buffer/lua through `slurm_bb_get_status`. So an answer takes at most one word, a job id or
one of VIEWS, never reaches `--function`, an admin verb or `local`, and only reads etcd. What it
shows depends on who asks, where Slurm says:

* no word or a view: Cray's `dwstat` table of that view (the pools by default), the same for
  everyone (daccore/services/dws.py maps buffers to DWS's objects; sites' scripts parse dwstat);
* a job id, caller unknown (datawarp; lua before 23.02): the public line, which anyone may
  read about any job: states, step names, staging counts, and `failed` without the text
  (errors name paths and files of the job's owner);
* a job id, caller known (lua 23.02+ passes the caller's uid and gid first; burst_buffer.lua
  hands them over in DAC_BBSTAT_CALLER=<uid>:<gid>, which a user cannot set in slurmctld's
  environment): the full line, errors included, for the buffer's owner, root and `admin_group`.

Standard library and the lean store path only: datawarp gives GetSysStatus 2 s.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing's own, without importing typing; mypy: True
if TYPE_CHECKING:
    from daccore.settings.cache import Json
    from daccore.store import Store

__all__ = ["answer", "warm", "dwstat", "public_line", "full_line", "VIEWS", "USAGE"]

#: dwstat's views dac has, as Cray's dwstat names them; the first is the default
VIEWS = ("pools", "sessions", "instances", "configurations", "activations")
USAGE = f"usage: scontrol show bbstat [job id | {' | '.join(VIEWS)}]"
#: etcd gets this long of datawarp's fixed 2 s for GetSysStatus
TIMEOUT = 1.5


def answer(
    argv: list[str], caller: str, settings: Json | None = None, store: Store | None = None
) -> str:
    """What dac-bbstat prints for the words `argv` asked by `caller` (DAC_BBSTAT_CALLER's
    `<uid>:<gid>`, or anything else for a caller Slurm did not name): one usage line, one
    error line, the job's line or the view's table, ending in a newline. `settings` and
    `store`: the answerer's (its config, a store reading its copy of etcd or etcd itself),
    else the cached config and etcd through the http transport. Errors become the line; the
    answerer's `Unsure` (a BaseException) passes through."""
    from daccore.services.slurm_args import JOB_ID

    if len(argv) > 1 or (argv and not (JOB_ID.fullmatch(argv[0]) or argv[0] in VIEWS)):
        return f"dac-bbstat: {USAGE}\n"
    try:
        return _answer(argv[0] if argv else VIEWS[0], caller, settings, store) + "\n"
    except Exception as e:  # noqa: BLE001 - Slurm prints stdout: one line, never a traceback
        from daccore.errors import DacError

        if isinstance(e, DacError):
            return f"dac-bbstat: {e}\n"
        return f"dac-bbstat: internal error: {type(e).__name__}\n"


def warm() -> None:
    """What an answer's first call would import, imported now (the answerer, at its start)."""
    from daccore.records import buffer_doc, layout, status_view  # noqa: F401
    from daccore.rules import inventory, rights  # noqa: F401
    from daccore.services import (
        dws,  # noqa: F401
        slurm_args,  # noqa: F401
    )


def _answer(word: str, caller_word: str, settings: Json | None, store: Store | None) -> str:
    if settings is None:
        from daccore.settings.cache import load_settings

        settings = load_settings()
    if store is None:
        from daccore.store import Store

        store = Store.from_dict(settings["etcd"], transport="http", max_timeout=TIMEOUT)
    if word in VIEWS:
        return dwstat(store, word, settings["mount_root"])
    job = word
    buf = store.buffer_json(job)
    if buf is None:
        return f"no buffer for job {job}"
    from daccore.records.buffer_doc import status_view
    from daccore.records.status_view import stages_text

    v = status_view(buf, store.status_docs(job))
    stages = store.job_stage_docs(job)  # those the job asked for while it ran (issue 36)
    caller = _caller(caller_word)
    if caller is not None and _may_see(caller, buf, settings.get("admin_group", "")):
        return ", ".join(filter(None, [full_line(v), stages_text(stages)]))
    return ", ".join(filter(None, [public_line(v), stages_text(stages, errors=False)]))


def dwstat(store: Store, view: str, mount_root: str) -> str:
    """One of VIEWS in Cray's dwstat layout: its column names, right-aligned, sizes in binary
    units, times local, `never` for an expiration; Cray's own line when there is nothing."""
    if view == "pools":
        from daccore.rules.inventory import summarize
        from daccore.units import format_size

        return _cray_table(
            ["pool", "units", "quantity", "free", "gran"],
            [
                [
                    s.name,
                    "bytes",
                    format_size(s.total * s.granularity),
                    format_size(s.free * s.granularity),
                    format_size(s.granularity),
                ]
                for s in summarize(store.summary_inventory())
            ],
            "no pools",
        )
    from daccore.services.dws import sessions

    found = sessions(store.buffer_docs(), store.all_status_docs())
    if view == "sessions":
        return _cray_table(
            ["sess", "state", "token", "creator", "owner", "created", "expiration", "nodes"],
            [
                [
                    s.name,
                    s.state,
                    s.name,
                    "-" if s.persistent else "SLURM",
                    s.owner,
                    _time(s.created),
                    "never",
                    len(s.compute_nodes),
                ]
                for s in found
            ],
            "no sessions",
        )
    if view == "instances":
        from daccore.units import format_size

        alive = store.alive() if found else set()
        return _cray_table(
            [
                "inst",
                "state",
                "sess",
                "bytes",
                "nodes",
                "created",
                "expiration",
                "intact",
                "label",
                "public",
                "confs",
            ],
            [
                [
                    s.name,
                    s.state,
                    s.name,
                    format_size(s.size),
                    len(s.storage_hosts),
                    _time(s.created),
                    "never",
                    _bool(set(s.storage_hosts) <= alive),
                    s.name if s.persistent else f"I{s.name}-0",
                    "false",
                    1,
                ]
                for s in found
            ],
            "no instances",
        )
    if view == "configurations":
        return _cray_table(
            ["conf", "state", "inst", "type", "activs"],
            [[s.name, s.state, s.name, s.type, len(s.attachments)] for s in found],
            "no scratch, cache, swap configurations",
        )
    from daccore.records.layout import mount_path

    return _cray_table(
        ["activ", "state", "sess", "conf", "nodes", "mount"],
        [
            [
                f"{s.name}:{job}",
                s.state,
                s.name,
                s.name,
                len(nodes),
                mount_path(
                    mount_root,
                    job,
                    s.name,
                    s.persistent,
                    "striped" if "striped" in s.access else "private",
                ),
            ]
            for s in found
            for job, nodes in sorted(s.attachments.items())
        ],
        "no activations",
    )


def _cray_table(headers: list[str], rows: list[list[object]], empty: str) -> str:
    if not rows:
        return empty
    from daccore.escape import printable

    cells = [headers] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(" ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells)


def _time(created: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(created))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def full_line(v: Json) -> str:
    from daccore.records.status_view import summary_line

    return summary_line(v)


def public_line(v: Json) -> str:
    """The line without anything of the owner's: no error text, no host names."""
    from daccore.records.buffer_doc import failed as failed_at
    from daccore.records.status_view import summary_line

    failed = any(failed_at(h, v.get("generation", 0)) for h in v["hosts"])
    line = summary_line({**v, "hosts": [{**h, "error": None} for h in v["hosts"]]})
    return line + (", failed (its owner sees why with dacctl status)" if failed else "")


def _caller(value: str) -> tuple[int, int] | None:
    uid, sep, gid = value.partition(":")
    if not (sep and uid.isascii() and uid.isdigit() and gid.isascii() and gid.isdigit()):
        return None
    return int(uid), int(gid)


def _may_see(caller: tuple[int, int], buf: Json, admin_group: str) -> bool:
    from daccore.rules.rights import groups_of, rights

    uid, gid = caller
    return uid == buf.get("owner_uid") or rights(uid, groups_of(uid, gid), admin_group) == 0
