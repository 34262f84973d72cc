import pytest

from daccore.records.lifecycle import next_step
from daccore.records.models import State

S = State


def walk(desired, reached=None, generation=1):
    steps = []
    while (step := next_step(desired, reached, None, generation)) is not None:
        steps.append(step[0])
        reached = step[1]
    return steps


def test_a_new_buffer_is_created_first():
    assert next_step(S.CREATED, None, None, 1) == ("create", S.CREATED)
    assert walk(S.CREATED) == ["create"]


def test_a_host_walks_one_state_at_a_time_in_lifecycle_order():
    assert walk(S.MOUNTED) == ["create", "stage_in", "mount"]
    assert walk(S.STAGED_OUT, S.MOUNTED) == ["unmount", "stage_out"]


def test_nothing_to_do_once_the_desired_state_is_reached_or_passed():
    assert next_step(S.STAGED_IN, S.STAGED_IN, None, 3) is None
    assert next_step(S.STAGED_IN, S.MOUNTED, None, 3) is None


@pytest.mark.parametrize("reached", [None, *[s for s in State if s is not State.DELETED]])
def test_teardown_jumps_from_anywhere_and_even_after_a_failure(reached):
    assert next_step(S.DELETED, reached, 5, 5) == ("delete", S.DELETED)
    assert next_step(S.DELETED, S.DELETED, None, 5) is None


def test_after_a_failure_the_host_waits_for_a_newer_spec():
    assert next_step(S.MOUNTED, S.CREATED, 2, 2) is None
    assert next_step(S.MOUNTED, S.CREATED, 2, 3) == ("stage_in", S.STAGED_IN)


def test_a_deleted_buffer_never_comes_back():
    assert next_step(S.MOUNTED, S.DELETED, None, 9) is None


def test_a_change_of_attachments_alone_calls_for_mount_without_changing_state():
    assert next_step(S.CREATED, S.CREATED, None, 4, mounts_match=False) == ("mount", S.CREATED)
    assert next_step(S.UNMOUNTED, S.UNMOUNTED, None, 4, mounts_match=False) == (
        "mount",
        S.UNMOUNTED,
    )
    assert next_step(S.CREATED, S.CREATED, None, 4, mounts_match=True) is None


def test_attachment_changes_wait_behind_lifecycle_steps_failures_and_deletion():
    assert next_step(S.MOUNTED, S.CREATED, None, 2, mounts_match=False) == ("stage_in", S.STAGED_IN)
    assert next_step(S.CREATED, S.CREATED, 4, 4, mounts_match=False) is None
    assert next_step(S.CREATED, S.DELETED, None, 4, mounts_match=False) is None
    assert next_step(S.DELETED, S.CREATED, None, 4, mounts_match=False) == ("delete", S.DELETED)
    assert next_step(S.CREATED, None, None, 1, mounts_match=False) == ("create", S.CREATED)
