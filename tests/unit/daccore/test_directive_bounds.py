"""Every bound a buffer record holds (daccore.records.bounds, enforced by the models at setup) is
refused by the directive grammar already, so at sbatch, in one line (issue 30): a script the
grammar accepts always makes a record, never a ValidationError at setup. Every other kind of
directive, and the comment block they are read from, is bounded too (issue 45): no script costs
job_process, inside slurmctld, more than one at those bounds."""

import threading
import time

import pytest

from daccore.records.bounds import (
    MAX_CREATE_LINES,
    MAX_DESTROY_LINES,
    MAX_PATH,
    MAX_SCRIPT_HEAD,
    MAX_SCRIPT_HEAD_LINES,
    MAX_STAGE_LINES,
    MAX_STAGE_TEXT,
)
from daccore.records.models import BufferRequest, StageRequest
from daccore.rules.directives import DirectiveError, parse_script

JOBDW = "#!/bin/sh\n#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=p\n"


def record(script: str) -> BufferRequest:
    """The request setup would build from the script (jobs.create_job_buffer)."""
    d = parse_script(script)
    assert d.jobdw is not None
    return BufferRequest(
        capacity=d.jobdw.capacity,
        pool="p",
        access=d.jobdw.access,
        stage_in=[
            StageRequest(type=s.type, source=s.source, destination=s.destination)
            for s in d.stage_in
        ],
        stage_out=[
            StageRequest(type=s.type, source=s.source, destination=s.destination)
            for s in d.stage_out
        ],
        persistent=d.persistent,
    )


def stage_in(i: int) -> str:
    return f"#DW stage_in type=file source=/d/f{i} destination=$DW_JOB_STRIPED/f{i}\n"


@pytest.mark.parametrize("direction", ["stage_in", "stage_out"])
def test_at_most_max_stage_lines_per_direction(direction):
    def line(i):
        return (
            stage_in(i)
            if direction == "stage_in"
            else f"#DW stage_out type=file source=$DW_JOB_STRIPED/f{i} destination=/d/f{i}\n"
        )

    script = JOBDW + "".join(line(i) for i in range(MAX_STAGE_LINES))
    assert len(getattr(record(script), direction)) == MAX_STAGE_LINES
    with pytest.raises(DirectiveError) as e:
        parse_script(script + line(MAX_STAGE_LINES))
    assert str(e.value) == (
        f"line {MAX_STAGE_LINES + 3}: {direction}: more than "
        f"{MAX_STAGE_LINES} {direction} lines: stage a directory, or name "
        "the files in one type=list line"
    )


def test_at_most_max_stage_lines_persistent_buffers():
    script = JOBDW + "".join(f"#DW persistentdw name=p{i}\n" for i in range(MAX_STAGE_LINES))
    assert len(record(script).persistent) == MAX_STAGE_LINES
    with pytest.raises(
        DirectiveError,
        match=f"^line {MAX_STAGE_LINES + 3}: persistentdw: "
        f"more than {MAX_STAGE_LINES} persistentdw lines$",
    ):
        parse_script(script + "#DW persistentdw name=one.more\n")


@pytest.mark.parametrize("key", ["source", "destination"])
def test_a_stage_path_is_at_most_path_max(key):
    def script(n):
        long = "/" + "a" * (n - 1)
        src, dst = (
            (long, "$DW_JOB_STRIPED/x")
            if key == "source"
            else ("/d/x", "$DW_JOB_STRIPED/" + "b" * (n - len("$DW_JOB_STRIPED/")))
        )
        return JOBDW + f"#DW stage_in type=file source={src} destination={dst}\n"

    assert record(script(MAX_PATH)).stage_in[0].model_dump()[key].__len__() == MAX_PATH
    with pytest.raises(DirectiveError) as e:
        parse_script(script(MAX_PATH + 1))
    assert str(e.value) == (
        f"line 3: stage_in: {key} is {MAX_PATH + 1} characters long; at most {MAX_PATH}"
    )


def test_the_stage_paths_together_fit_one_etcd_value():
    def line(i):
        return f"#DW stage_in type=file source=/{'s' * 4095} destination=$DW_JOB_STRIPED/{i:04}\n"

    fits = MAX_STAGE_TEXT // (4096 + len("$DW_JOB_STRIPED/0000"))
    script = JOBDW + "".join(line(i) for i in range(fits))
    assert len(record(script).stage_in) == fits
    with pytest.raises(DirectiveError) as e:
        parse_script(script + line(fits))
    assert str(e.value) == (
        f"line {fits + 3}: stage_in: the stage lines' paths come to more "
        f"than {MAX_STAGE_TEXT // 1024} KiB: stage directories, or name the "
        "files in one type=list line"
    )
    with pytest.raises(ValueError, match="the stage lines' paths come to"):  # the record too
        BufferRequest(
            capacity=1,
            pool="p",
            stage_in=[
                StageRequest(type="file", source="/" + "s" * 4095, destination="$DW_JOB_STRIPED/x")
            ]
            * (fits + 1),
        )


PREFIXES = ("#DW", "#BB", "#BB_LUA")  # BB_LUA: burst_buffer/lua's default Directive
#: each kind of directive: the most lines of it, one line of it (the i-th, after `prefix`), and
#: the one-line refusal of the line after the most, with its line number left out
KINDS = {
    "jobdw": (
        1,
        lambda i: "jobdw capacity=1GiB",
        "a job may have only one jobdw (the first is on line 2)",
    ),
    "jobdw (bare)": (
        1,
        lambda i: "capacity=1GiB",
        "a job may have only one jobdw (the first is on line 2)",
    ),
    "swap": (1, lambda i: "swap 1GiB", "swap is given twice"),
    "stage_in": (
        MAX_STAGE_LINES,
        lambda i: f"stage_in type=file source=/d/f{i} destination=$DW_JOB_STRIPED/f{i}",
        f"more than {MAX_STAGE_LINES} stage_in lines: stage a directory, or name the files in "
        "one type=list line",
    ),
    "stage_out": (
        MAX_STAGE_LINES,
        lambda i: f"stage_out type=file source=$DW_JOB_STRIPED/f{i} destination=/d/f{i}",
        f"more than {MAX_STAGE_LINES} stage_out lines: stage a directory, or name the files in "
        "one type=list line",
    ),
    "persistentdw": (
        MAX_STAGE_LINES,
        lambda i: f"persistentdw name=p{i}",
        f"more than {MAX_STAGE_LINES} persistentdw lines",
    ),
    "create_persistent": (
        MAX_CREATE_LINES,
        lambda i: f"create_persistent name=c{i} capacity=1GiB access=striped type=scratch",
        f"more than {MAX_CREATE_LINES} create_persistent lines: create the others from another job",
    ),
    "destroy_persistent": (
        MAX_DESTROY_LINES,
        lambda i: f"destroy_persistent name=d{i}",
        f"more than {MAX_DESTROY_LINES} destroy_persistent lines: destroy the others from another "
        "job",
    ),
}


def kind_script(kind: str, n: int, prefix: str | None = None) -> str:
    """A script of `n` lines of `kind` (after a jobdw, which the others but create_persistent's
    and destroy_persistent's need), under `prefix`, or each prefix in turn."""
    _, line, _ = KINDS[kind]
    head = "" if kind.startswith(("jobdw", "create", "destroy")) else "#DW jobdw capacity=1GiB\n"
    lines = [f"{prefix or PREFIXES[i % 3]} {line(i)}\n" for i in range(n)]
    return "#!/bin/sh\n" + head + "".join(lines) + "srun x\n"


@pytest.mark.parametrize("prefix", [*PREFIXES, None])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_directive_is_bounded_under_every_prefix(kind, prefix):
    """Accepted at its bound, refused one line past it in one line naming that line; the lines
    of every prefix (None: each in turn) count together."""
    most, _, refusal = KINDS[kind]
    parse_script(kind_script(kind, most, prefix))
    script = kind_script(kind, most + 1, prefix)
    with pytest.raises(DirectiveError) as e:
        parse_script(script)
    line = script.count("\n") - 1  # the line before `srun x`
    assert str(e.value) == f"line {line}: {kind.split()[0]}: {refusal}"


def test_a_persistent_buffer_bound_is_per_kind():
    """As many creates as their bound and as many destroys as theirs: each kind has its own."""
    creates = kind_script("create_persistent", MAX_CREATE_LINES)
    destroys = kind_script("destroy_persistent", MAX_DESTROY_LINES).removeprefix("#!/bin/sh\n")
    d = parse_script(creates.replace("srun x\n", "") + destroys)
    assert (len(d.create), len(d.destroy)) == (MAX_CREATE_LINES, MAX_DESTROY_LINES)


HEAD_TOO_LONG = (
    "script: the comment block it starts with, where directives are read, is more than "
    f"{MAX_SCRIPT_HEAD // 1024} KiB: move comments below the first command"
)
HEAD_TOO_MANY = (
    "script: the comment block it starts with, where directives are read, is more than "
    f"{MAX_SCRIPT_HEAD_LINES} lines: move comments below the first command"
)


@pytest.mark.parametrize("command", [b"\nsrun x\n" + b"echo body\n" * 300_000, b""])
def test_the_leading_comment_block_is_at_most_max_script_head_bytes(command):
    """Counted to the first line not starting with '#' (none: the script's end); the body after
    it, however long, is never read."""

    def script(n: int) -> bytes:  # a comment block of n bytes, its third line a long comment
        start = JOBDW.encode()
        return start + b"#" + b"x" * (n - len(start) - 1) + command

    assert parse_script(script(MAX_SCRIPT_HEAD)).jobdw is not None
    with pytest.raises(DirectiveError) as e:
        parse_script(script(MAX_SCRIPT_HEAD + 1))
    assert str(e.value) == f"line 3: {HEAD_TOO_LONG}"


@pytest.mark.parametrize("end", ["srun x\n", ""])
def test_the_leading_comment_block_is_at_most_max_script_head_lines(end):
    def script(n: int) -> str:  # a comment block of n lines
        return JOBDW + "#SBATCH --comment=x\n" * (n - 2) + end

    assert parse_script(script(MAX_SCRIPT_HEAD_LINES)).jobdw is not None
    with pytest.raises(DirectiveError) as e:
        parse_script(script(MAX_SCRIPT_HEAD_LINES + 1))
    assert str(e.value) == f"line {MAX_SCRIPT_HEAD_LINES + 1}: {HEAD_TOO_MANY}"


def at_every_bound() -> bytes:
    """A script at every bound at once: what the grammar accepts at its most."""
    budget = MAX_STAGE_TEXT // (2 * MAX_STAGE_LINES)  # bytes of both paths of a stage line
    inside = "$DW_JOB_STRIPED/{:04}"
    outside = "/" + "s" * (budget - len(inside.format(0)) - 1)
    return (
        JOBDW
        + "#DW swap 1GiB\n"
        + "".join(
            f"#DW stage_in type=file source={outside} destination={inside.format(i)}\n"
            f"#DW stage_out type=file source={inside.format(i)} destination={outside}\n"
            f"#DW persistentdw name=p{i:04}{'n' * 59}\n"
            for i in range(MAX_STAGE_LINES)
        )
        + "".join(
            f"#BB create_persistent name=c{i} capacity=1GiB access=striped type=scratch\n"
            for i in range(MAX_CREATE_LINES)
        )
        + "".join(f"#BB destroy_persistent name=d{i}\n" for i in range(MAX_DESTROY_LINES))
        + "srun x\n"
    ).encode()


def test_the_comment_block_holds_every_other_bound_at_once():
    """Its bounds refuse only scripts past another bound, or with comments past what this
    script leaves them: its 0.67 MiB and 3,019 lines leave 0.33 MiB and 6,981 lines."""
    script = at_every_bound()
    d = parse_script(script)
    assert len(record(script.decode()).stage_in) == MAX_STAGE_LINES
    assert len(d.persistent[0]) == 64
    assert (len(d.create), len(d.destroy)) == (MAX_CREATE_LINES, MAX_DESTROY_LINES)
    head = script[: script.index(b"\nsrun")]
    assert len(head) <= 0.7 * MAX_SCRIPT_HEAD and head.count(b"\n") + 1 <= 3_020


def test_a_long_run_of_continued_lines_takes_linear_time():
    """Joined one by one, 9,000 continued lines of 100 bytes took 1.6 s inside slurmctld. (They
    were `# ` lines: a directive goes on in lines of its own prefix only, as in Slurm.)"""
    script = JOBDW + "#DW stage_in \\\n" + ("#DW " + "x" * 100 + " \\\n") * 9_000 + "#DW\nsrun x\n"
    start = time.monotonic()
    with pytest.raises(DirectiveError, match="^line 3: stage_in: 'x+…' is not key=value$"):
        parse_script(script)
    assert time.monotonic() - start < 0.5


class _Mirror:
    changes, lock = 1, threading.Lock()

    def fresh(self):
        return True


@pytest.mark.parametrize(
    "script",
    [
        kind_script("create_persistent", MAX_CREATE_LINES + 1),
        kind_script("destroy_persistent", MAX_DESTROY_LINES + 1),
        kind_script("swap", 2),
        JOBDW + "#\n" * MAX_SCRIPT_HEAD_LINES,
    ],
)
def test_the_answerer_refuses_in_the_same_words(script, monkeypatch):
    """dac-answer answers job_process with the grammar's own parse (slurm_functions.py): a
    script it is sent is refused at the same bound, in the same line, before any store read."""
    from dacservice.answerer.answers import Answerer

    a = Answerer.__new__(Answerer)
    a._lock, a._epoch, a._valid, a._valid_moves = threading.Lock(), 1, {}, 0
    a.mirror, a._mirror_store, a._direct = _Mirror(), object(), object()  # type: ignore[assignment]
    config = {"trusted_uids": frozenset({0}), "min_owner_uid": 1000}
    config |= {"default_pool": None, "lua_directive": "BB_LUA"}
    monkeypatch.setattr(a, "_reload", lambda: config)
    with pytest.raises(DirectiveError) as e:
        parse_script(script)
    job = ["--job", "/var/spool/slurm/hash.1/job.1/script"]
    assert a.answer("job_process", job, script.encode()) == ("mirror", (1, f"{e.value}\n", ""))
