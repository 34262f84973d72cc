"""The request checks every user service request passes before it reaches the store."""

import pytest

from daccore.errors import UserError
from daccore.services.user_requests import VERBS, check_args


def test_check_args_fills_what_was_not_given_with_none():
    assert check_args("buffers", {"pool": "default"}) == {
        "owner_uid": None,
        "state": None,
        "pool": "default",
    }
    assert check_args("pools", {}) == {}


@pytest.mark.parametrize(
    "verb, args, message",
    [
        ("drain", {}, "unknown request 'drain' (requests: " + ", ".join(VERBS) + ")"),
        (["pools"], {}, "unknown request '['pools']' (requests: " + ", ".join(VERBS) + ")"),
        ("show", {"buffer": "7", "rights": 0}, "show: arguments must be some of: buffer"),
        ("show", ["7"], "show: arguments must be some of: buffer"),
        ("pools", {"x": 1}, "pools: arguments must be some of: none"),
        (
            "create-persistent",
            {"capacity": "1"},
            "create-persistent: argument 'capacity' is not a valid int",
        ),
        (
            "create-persistent",
            {"owner_uid": True},
            "create-persistent: argument 'owner_uid' is not a valid int",
        ),
        (
            "create-persistent",
            {"owner_uid": -1},
            "create-persistent: argument 'owner_uid' is not a valid int",
        ),
        ("status", {"buffer": 7}, "status: argument 'buffer' is not a valid str"),
    ],
)
def test_check_args_refuses_what_a_verb_does_not_take(verb, args, message):
    with pytest.raises(UserError) as e:
        check_args(verb, args)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "name", ["7\n", "../pools/default", "7/x", "", "x" * 129, "-a", "a b", "é"]
)
def test_check_args_lets_only_names_reach_a_store_key(name):
    with pytest.raises(UserError, match="argument 'buffer' is not a valid name"):
        check_args("status", {"buffer": name})
    assert check_args("status", {"buffer": "proj-1.a:b"}) == {"buffer": "proj-1.a:b"}
