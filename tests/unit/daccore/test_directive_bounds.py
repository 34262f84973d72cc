"""Every bound a buffer record holds (daccore.records.bounds, enforced by the models at setup) is
refused by the directive grammar already, so at sbatch, in one line (issue 30): a script the
grammar accepts always makes a record, never a ValidationError at setup."""

import pytest

from daccore.records.bounds import MAX_PATH, MAX_STAGE_LINES, MAX_STAGE_TEXT
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
