import pytest
from pydantic import ValidationError

from daccore.records.models import Allocation, Brick, BrickRef, Host, State, Status


def test_states_are_ordered_and_next_walks_the_lifecycle():
    walk: list[str] = []
    s: State | None = State.CREATED
    while s:
        walk.append(s.value)
        s = s.next()
    assert walk == ["created", "staged_in", "mounted", "unmounted", "staged_out", "deleted"]
    assert State.MOUNTED.rank > State.STAGED_IN.rank


def test_host_refuses_a_brick_listed_twice():
    b = Brick(name="b0", device="/dev/loop0", capacity=1, pool="p")
    with pytest.raises(ValidationError, match="brick device '/dev/loop0' is listed twice"):
        Host(name="h", bricks=[b, b.model_copy(update={"name": "b1"})])


def test_allocation_primary_must_hold_a_brick():
    ref = BrickRef(host="h1", brick="b0", device="/dev/x", capacity=10)
    assert Allocation(bricks=[ref], primary_host="h1").size == 10
    with pytest.raises(ValidationError, match="holds none of the bricks"):
        Allocation(bricks=[ref], primary_host="h2")


def test_names_that_would_break_a_key_are_refused():
    with pytest.raises(ValidationError):
        Status(buffer="a/b", host="h")
    with pytest.raises(ValidationError):
        Status(buffer="", host="h")


def test_records_ignore_unknown_fields_written_by_a_newer_version():
    s = Status.model_validate_json('{"buffer": "j1", "host": "h", "colour": "red"}')
    assert s.buffer == "j1"
