"""Slurm's one line (daccore/services/slurm_answer.py `_one_line`): bounded, one line, and a
long message keeps its end, where it says who must act and what was kept."""

from daccore.services.slurm_answer import LINE_MAX, _one_line


def test_a_short_message_is_one_line_as_it_was():
    assert _one_line("buffer 4: delete failed\n on h1 ") == "buffer 4: delete failed  on h1"


def test_a_long_message_is_cut_in_its_middle_and_keeps_who_must_act():
    holders = "; ".join(f"(pid {p}; uid 5678) has it mounted at /tmp/{'d' * 300}" for p in range(3))
    text = f"buffer 45: /dev/loop20: still mounted: {holders}; an admin must end them; " + (
        "nothing was zeroed or released, and teardown retries"
    )
    line = _one_line(text)
    assert len(line) == LINE_MAX and "\n" not in line
    assert line.startswith("buffer 45: /dev/loop20: still mounted: (pid 0;")
    assert line.endswith(
        "an admin must end them; nothing was zeroed or released, and teardown retries"
    )
    assert " [...] " in line


def test_a_failed_tasks_long_last_line_keeps_its_holder_and_its_end():
    """The task's line went into the error cut at 300 characters, so a holder's long mount
    path took "nothing was zeroed or released" off the end (CI, issue 45's teardown test)."""
    from daccore.errors import TAIL_MAX, PlaybookFailed

    holder = f"(pid 4242; uid 5678) has it mounted at /tmp/{'p' * 200}/dac-server-1/45/mnt"
    last = (
        f"/dev/loop10: the buffer's filesystem is still mounted after its unmount: {holder}; "
        f"{holder}; {holder}; not the job's user's alone, so not killed: an admin must end "
        "them; nothing was zeroed or released, and teardown retries"
    )
    message = str(PlaybookFailed("delete", "unmount and wipe", "dac-server-1", 1, last))
    assert len(message) < len("delete failed on dac-server-1 at task '' (rc 1): ") + 40 + TAIL_MAX
    assert "(pid 4242; uid 5678) has it mounted at /tmp/" in message
    assert message.endswith(
        "an admin must end them; nothing was zeroed or released, and teardown retries"
    )
