"""The one-line staging summary `dacctl status --line` and `scontrol show bbstat` print."""

from daccore.records.status_view import staged_text, summary_line
from daccore.units import format_duration

MiB = 1 << 20


def progress(done, total, files, files_total, rate, eta, counting):
    return {
        "bytes_done": done,
        "bytes_total": total,
        "files_done": files,
        "files_total": files_total,
        "rate": rate,
        "eta": eta,
        "counting": counting,
    }


def test_while_the_walk_counts_there_is_no_share_and_no_time_left_yet():
    p = progress(12 * MiB, 40 * MiB, 120, 400, 20 * MiB, None, True)
    assert staged_text([p]) == "12MiB/40MiB 120/400 files at 20MiB/s, counting"
    # the copier's first line, before the walk found anything: never "100 %"
    first = progress(0, 0, 0, 0, 0, None, True)
    assert staged_text([first]) == "0B/0B 0/0 files, counting"
    # one host still counting makes the sum a partial one too
    other = progress(MiB, MiB, 1, 1, MiB, 0.0, False)
    assert "%" not in staged_text([first, other])


def test_after_the_walk_the_time_left_is_shown_until_done():
    p = progress(12 * MiB, 40 * MiB, 120, 400, 20 * MiB, 1.4, False)
    assert staged_text([p]) == "12MiB/40MiB 30% 120/400 files at 20MiB/s, 1s left"
    p = progress(40 * MiB, 40 * MiB, 400, 400, 20 * MiB, 0.0, False)
    assert staged_text([p]) == "40MiB/40MiB 100% 400/400 files at 20MiB/s"


def test_a_record_from_before_rate_and_eta_still_reads():
    old = {"bytes_done": 0, "bytes_total": 0, "files_done": 0, "files_total": 0}
    assert staged_text([old]) == "0B/0B 100% 0/0 files"


def test_the_summary_line_carries_state_step_and_progress():
    v = {
        "buffer": "51",
        "desired_state": "staged_in",
        "hosts": [
            {
                "host": "dac1",
                "state": "created",
                "step": "stage_in",
                "progress": progress(MiB, 4 * MiB, 1, 4, MiB, 3.0, False),
                "error": None,
            },
            {"host": "dac2", "state": "created", "step": "", "progress": None, "error": None},
        ],
    }
    assert summary_line(v) == (
        "buffer 51: created -> staged_in, stage_in, staged 1MiB/4MiB 25% "
        "1/4 files at 1MiB/s, 3s left"
    )


def test_durations_are_short():
    assert [format_duration(s) for s in (0, 42.4, 185, 3599.6, 7260)] == [
        "0s",
        "42s",
        "3m05s",
        "1h00m",
        "2h01m",
    ]
