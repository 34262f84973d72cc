"""One call of a Slurm function as its handler takes it, and the functions that answer without
changing a buffer: pools, job_process and paths (inside slurmctld), show_*, real_size. Those
that make, stage, mount and end buffers are slurm_steps.py's.

`SlurmCall`: the arguments Slurm passed once every one was checked (slurm_answer.py), the
descriptors the checks opened (`CallFiles`), and the job script read and parsed through them
(`script_bytes`, `directives`). A class with slots, frozen by hand, not a dataclass:
`dataclasses` imports inspect, ast and dis, 14 modules the hooks inside slurmctld would load
for nothing.

Each function is a handler the command table names (command_table.py): `(call, settings,
store) -> stdout`, `settings` the cached config, `store` the answerer's or etcd's through the
http transport (slurm_answer.py says which, and what a failure becomes). job_process, pools and
paths take the lean path: no pydantic, yaml or grpc is imported (bench/hot_path.py,
docs/performance.md).
"""

from __future__ import annotations

import functools
import json
import os

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    from daccore.rules.directives import Directives
    from daccore.settings.cache import Json
    from daccore.store import Store

__all__ = [
    "SlurmCall",
    "CallFiles",
    "script_bytes",
    "directives",
    "pools",
    "job_process",
    "paths",
    "buffer_paths",
    "show",
    "real_size",
    "READ_CHUNK",
]


class CallFiles:
    """The descriptors a call's checks opened, the call's until it ends (`close`): the answerer
    lives on. `script`: the job script, opened at its first read (`script_bytes`);
    `pathfile`: paths's path file, which paths takes and closes; `nodes`: pre_run's node file."""

    __slots__ = ("script", "pathfile", "nodes")

    def __init__(
        self, script: int | None = None, pathfile: int | None = None, nodes: int | None = None
    ) -> None:
        self.script, self.pathfile, self.nodes = script, pathfile, nodes

    def close(self) -> None:
        for name in CallFiles.__slots__:
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)


class SlurmCall:
    """Slurm's function `function` with the arguments its handlers read, checked: `token` (a
    job id, or a persistent buffer's name where the function is `named`), `job` (the script's
    path), `user` and `groupid` (the owner's, at or above min_owner_uid), `capacity` (Slurm's
    POOL:SIZE), `access`, `type`, `nodes` (Slurm's hostlist), `array_job`, `hurry`,
    `pathfile_reply` (paths answers the path file's lines, its caller writes them), `script`
    (the job script's bytes as the answerer's peer read them: none is opened), `trusted` (the
    uids whose files are believed), `hot` (run inside slurmctld) and `files`."""

    __slots__ = (
        "function",
        "token",
        "job",
        "user",
        "groupid",
        "capacity",
        "access",
        "type",
        "nodes",
        "array_job",
        "hurry",
        "pathfile_reply",
        "script",
        "trusted",
        "hot",
        "files",
    )

    function: str
    token: str | None
    job: str | None
    user: int | None
    groupid: int | None
    capacity: str | None
    access: str | None
    type: str | None
    nodes: str | None
    array_job: str | None
    hurry: bool
    pathfile_reply: bool
    script: bytes | None
    trusted: frozenset[int]
    hot: bool
    files: CallFiles

    def __init__(
        self,
        function: str,
        *,
        token: str | None = None,
        job: str | None = None,
        user: int | None = None,
        groupid: int | None = None,
        capacity: str | None = None,
        access: str | None = None,
        type: str | None = None,
        nodes: str | None = None,
        array_job: str | None = None,
        hurry: bool = False,
        pathfile_reply: bool = False,
        script: bytes | None = None,
        trusted: frozenset[int] = frozenset({0}),
        hot: bool = False,
        files: CallFiles | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "function", function)
        put(self, "token", token)
        put(self, "job", job)
        put(self, "user", user)
        put(self, "groupid", groupid)
        put(self, "capacity", capacity)
        put(self, "access", access)
        put(self, "type", type)
        put(self, "nodes", nodes)
        put(self, "array_job", array_job)
        put(self, "hurry", hurry)
        put(self, "pathfile_reply", pathfile_reply)
        put(self, "script", script)
        put(self, "trusted", trusted)
        put(self, "hot", hot)
        put(self, "files", CallFiles() if files is None else files)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a SlurmCall is frozen: {name} cannot change")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a SlurmCall is frozen: {name} cannot go")

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__ if n != "script")
        return f"SlurmCall({shown})"


def _script_fd(call: SlurmCall) -> int:
    """The job script, checked (slurm_args) and opened once. A job array's task whose script
    Slurm never wrote (24.11+) gets the array's, linked where Slurm looks for it: the array's
    id is the one burst_buffer.lua passes paths (--array-job, job_info), else scontrol's,
    asked only outside slurmctld (a hook inside it holds the job lock scontrol needs)."""
    from daccore.services import slurm_args as sa

    if call.files.script is None:
        assert call.job is not None, "the function needs --job (its row's needs)"
        try:
            call.files.script = sa.open_read(
                call.job, "the job script", call.trusted, None, ("script",)
            )
        except sa.Missing:
            if call.token is None or (call.hot and call.array_job is None):
                raise
            token = call.token
            call.files.script = sa.link_task_script(
                call.job, token, lambda: call.array_job or _array_of(token), call.trusted
            )
    return call.files.script


def _array_of(job: str) -> str | None:
    from daccore.services.slurmjob import array_job_id

    return array_job_id(job)


def directives(call: SlurmCall, lua_directive: str, data: bytes | None = None) -> Directives:
    """The job script's directives (`data`: its bytes, if already read)."""
    from daccore.rules.directives import parse_script

    if data is None:
        data = script_bytes(call)
    if not call.hot or len(data) > PARSE_CACHE_BYTES:
        return parse_script(data, lua_directive)
    return _copy(_parse_cached(data, lua_directive))


def script_bytes(call: SlurmCall) -> bytes:
    """The job script's first bytes: as far as its leading comment block, the only part a
    parse reads, goes (or past that block's bound), so a long script costs one read."""
    from daccore.errors import AdminError
    from daccore.rules.directives import head_read

    if call.script is not None:  # the answerer's peer read it
        return call.script
    fd = _script_fd(call)
    try:  # read from the start each time: a call run again after etcd came back reads it anew
        os.lseek(fd, 0, os.SEEK_SET)
        data = bytearray()
        while chunk := os.read(fd, READ_CHUNK):
            data += chunk
            if head_read(data, len(data) - len(chunk)):
                break
    except OSError as e:
        raise AdminError(f"cannot read the job script {call.job}: {e.strerror}") from None
    return bytes(data)


#: what script_bytes reads at once: all of most scripts, and a sixteenth of the most a parse
#: reads (daccore.records.bounds.MAX_SCRIPT_HEAD)
READ_CHUNK = 64 << 10


#: job_process and paths parse their script on every call: the warm answerer keeps the last
#: PARSE_CACHE parses of scripts up to PARSE_CACHE_BYTES long, keyed by the script's bytes
#: themselves (compared whole, never a digest) and the only setting the parse reads
#: (lua_directive). A script is still read on every call; a refused one is parsed again.
PARSE_CACHE = 256
PARSE_CACHE_BYTES = 64 << 10


@functools.lru_cache(maxsize=PARSE_CACHE)
def _parse_cached(data: bytes, lua_directive: str) -> Directives:
    from daccore.rules.directives import parse_script

    return parse_script(data, lua_directive)


def _copy(found: Directives) -> Directives:
    """A cached parse's own copy for one call: its lists are new (their items are tuples)."""
    from daccore.rules.directives import Directives

    copy = Directives()
    for name in Directives.__slots__:
        value = getattr(found, name)
        setattr(copy, name, list(value) if isinstance(value, list) else value)
    return copy


# -- the answers, as the table names them -------------------------------------------------------


def pools(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.rules.inventory import summarize

    return json.dumps(
        {
            "pools": [
                {
                    "id": s.name,
                    "units": "bytes",
                    "granularity": s.granularity,
                    "quantity": s.total,
                    "free": s.free,
                }
                for s in summarize(store.summary_inventory())
            ]
        }
    )


def job_process(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.services import jobs

    data = script_bytes(call)
    pool, directive = settings["default_pool"], settings["lua_directive"]
    jobs.validate(store, directives(call, directive, data), pool, call.user)
    return ""  # the answerer keeps this answer by what it read (answers.py, VALID_KEPT)


def paths(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.services import jobs

    assert call.token is not None, "paths needs --token (its row's needs)"
    buffer = store.buffer_json(call.token)
    if buffer is not None:
        text = buffer_paths(call.token, buffer, settings["mount_root"])
    else:  # no jobdw: the job may still attach persistent buffers
        persistent = directives(call, settings["lua_directive"]).persistent if call.job else []
        text = _lines(jobs.paths_for(call.token, "", persistent, settings["mount_root"]))
    if call.pathfile_reply:  # the answerer's peer writes them (slurm_answer.answer)
        return text
    fd, call.files.pathfile = call.files.pathfile, None
    assert fd is not None, "the path file is opened by the checks"
    try:  # os.write, not a text file's buffer and encoder
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    return ""


def buffer_paths(token: str, buffer: Json, mount_root: str) -> str:
    """The path file's text of job `token` whose buffer spec (JSON, as etcd holds it) is
    `buffer`: the one place of it, for `paths` and for the answerer's paths files
    (dacservice/answerer/published.py)."""
    from daccore.services import jobs

    request = buffer["request"]
    return _lines(jobs.paths_for(token, request["access"], request["persistent"], mount_root))


def _lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def show(call: SlurmCall, settings: Json, store: Store) -> str:
    """show_instances, show_sessions, show_configurations: what `scontrol show dwstat` shows
    too (bbstat.py)."""
    from daccore.services.dws import sessions

    found = sessions(store.buffer_docs())
    if call.function == "show_instances":
        return json.dumps(
            {
                "instances": [
                    {
                        "id": s.name,
                        "capacity": {"bytes": s.size, "nodes": 0},
                        "links": {"session": s.name},
                    }
                    for s in found
                ]
            }
        )
    if call.function == "show_sessions":
        return json.dumps(
            {
                "sessions": [
                    {"id": s.name, "created": s.created, "owner": s.owner, "token": s.name}
                    for s in found
                ]
            }
        )
    return json.dumps(
        {"configurations": [{"id": s.name, "links": {"instance": s.name}} for s in found]}
    )


def real_size(call: SlurmCall, settings: Json, store: Store) -> str:
    from daccore.records import buffer_doc

    assert call.token is not None, "real_size needs --token (its row's needs)"
    current = store.buffer_json(call.token)
    size = buffer_doc.size(current) if current else 0
    return json.dumps({"token": call.token, "capacity": size, "units": "bytes"})
