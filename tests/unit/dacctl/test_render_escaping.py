from daccore.errors import Kind
from daccore.records.models import (
    Allocation,
    BrickRef,
    Buffer,
    BufferRequest,
    StageRequest,
    Status,
    StatusError,
)
from daccore.services.admin_views import buffer_detail
from dacctl import render

MiB = 1 << 20


def _controls(text: str) -> list[str]:
    return [c for c in text if not c.isprintable() and c != "\n"]


def test_show_escapes_every_field_a_user_or_a_task_could_fill():
    buf = Buffer(
        name="7",
        owner_uid=1234,
        owner_gid=4321,
        job_id=7,
        request=BufferRequest(
            capacity=512 * MiB,
            pool="default",
            stage_in=[
                StageRequest(
                    type="file", source="/d/\u009b2J\u202e", destination="$DW_JOB_STRIPED/x"
                )
            ],
        ),
        allocation=Allocation(
            primary_host="h1",
            bricks=[BrickRef(host="h1", brick="b0", device="/dev/loop0", capacity=512 * MiB)],
        ),
    )
    failed = Status(
        buffer="7",
        host="h1",
        step="stage_in: \x1b[2J",
        error=StatusError(
            category=Kind.USER,
            message="x\udcff\x1b]0;t\x07",
            detail="ok\n\x1b[31mred\rline\x0bvt\x85",
        ),
    )
    text = render.buffer_detail(buffer_detail(buf, {"h1": failed}, names=lambda uid: "a\x1bb"))
    assert _controls(text) == []
    assert "owner       a\\x1bb (uid 1234" in text
    assert "stage_in    file /d/\\u009b2J\\u202e -> $DW_JOB_STRIPED/x" in text
    assert "h1: user error (generation 0): x\\xff\\x1b]0;t\\x07" in text
    assert "  \\x1b[31mred\\rline\\x0bvt\\u0085" in text
    assert "stage_in: \\x1b[2J" in text


def test_a_table_cell_cannot_break_its_row():
    out = render.table(["A", "B"], [["x\ny", "\x1b[2J"]])
    assert out.splitlines() == ["A     B", "x\\ny  \\x1b[2J"]
