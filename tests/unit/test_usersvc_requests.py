"""Whatever JSON a request to dac's user service holds, the service's own answer to it
(dacservice/users/service.py, _Service._answer) is a result or one line of its kind, never an
internal error (issue 45: `stage wait` with a list among its ids was a TypeError in the
service). A wrong type or a missing argument is the user's, and reaches no store."""

import json
from typing import Any

import pytest

from daccore.services.user_requests import MAX_LIST, REQUIRED, VERBS
from daccore.settings.config import DacConfig
from dacservice.users.service import _Service

#: JSON values of every type, and ints no argument takes; each verb's argument is sent each
#: value that is not of its type
VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    7,
    -1,
    1 << 63,
    1 << 70,
    1.5,
    1e300,
    "",
    "x",
    "7",
    [],
    [1],
    ["x"],
    {},
    {"a": 1},
]
#: lists that are no list of stage ids
BAD_IDS: list[Any] = [
    [[1]],
    [{"a": 1}],
    [None],
    [True],
    ["1"],
    [1.5],
    [-1],
    [1 << 63],
    [1] * 1000 + [[2]],  # issue 45's: past the first thousand, once the only ones looked at
    [0] * (MAX_LIST + 1),
]


class Untouchable:
    """The store a refused request never reaches."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused request asked the store for {name}")


class NoBuffers:
    """A store without buffers (create-persistent asks whether the name is taken)."""

    def buffer(self, name: str) -> None:
        return None


@pytest.fixture
def service():
    """The service's own request handler, its port bound on loopback (no thread started)."""
    made: list[_Service] = []

    def make(store: Any = None) -> _Service:
        backing: Any = store or Untouchable()
        made.append(_Service(("127.0.0.1", 0), DacConfig(), backing))
        return made[-1]

    yield make
    for s in made:
        for sock in (s.listener, s.wake_r, s.wake_w):
            sock.close()
        s.selector.close()


def refusal(reply: dict[str, Any]) -> str:
    """The one line of a user's refusal (anything else fails the test)."""
    assert set(reply) == {"error"} and reply["error"]["kind"] == "user", reply
    message = reply["error"]["message"]
    assert message and message.isprintable() and "\n" not in message, reply
    json.dumps(reply)  # what the service sends
    return str(message)


def wrong_values(kind: type) -> list[Any]:
    def fits(value: Any) -> bool:
        if type(value) is not kind:
            return False
        return not isinstance(value, int) or kind is bool or 0 <= value < 1 << 63

    wrong = [v for v in VALUES if v is not None and not fits(v)]
    return wrong + BAD_IDS if kind is list else wrong


CASES = [
    (verb, key, value)
    for verb, spec in VERBS.items()
    for key, (kind, _) in spec.items()
    for value in wrong_values(kind)
]


@pytest.mark.parametrize("verb, key, value", CASES)
def test_a_value_of_another_type_is_the_users_one_line_and_reaches_no_store(
    service, verb, key, value
):
    reply = service()._answer(1234, 4321, {"verb": verb, "args": {key: value}}, "127.0.0.1")
    assert f"{verb}: argument '{key}' is not a valid " in refusal(reply)


@pytest.mark.parametrize(
    "verb, key", [(verb, key) for verb, keys in REQUIRED.items() for key in keys]
)
def test_an_argument_a_verb_needs_left_out_or_null_is_the_users_one_line(service, verb, key):
    given = {k: 1 if VERBS[verb][k][0] is int else "7" for k in REQUIRED[verb] if k != key}
    for args in (given, {**given, key: None}):
        reply = service()._answer(1234, 4321, {"verb": verb, "args": args}, "127.0.0.1")
        assert refusal(reply) == f"{verb}: argument '{key}' is missing"


@pytest.mark.parametrize(
    "request_",
    [
        {},
        {"verb": None},
        {"verb": ["stage-wait"]},
        {"verb": {"stage-wait": 1}},
        {"verb": 7},
        {"verb": "stage-wait\nstatus"},
        {"verb": "\x1b[2J" * 20},
        {"verb": "stage-wait", "args": None},
        {"verb": "stage-wait", "args": [["42"]]},
        {"verb": "stage-wait", "args": "42"},
        {"verb": "stage-wait", "args": {"job": "42", "rights": 0}},
    ],
)
def test_a_request_of_another_shape_is_the_users_one_line(service, request_):
    refusal(service()._answer(1234, 4321, request_, "127.0.0.1"))


def test_an_admins_owner_past_32_bits_is_refused_before_any_record(service):
    args = {"name": "p1", "capacity": 1 << 30, "owner_uid": 1 << 62, "owner_gid": 1 << 40}
    reply = service(NoBuffers())._answer(0, 0, {"verb": "create-persistent", "args": args}, "")
    assert refusal(reply) == f"owner uid {1 << 62} is no uid: they are below {1 << 32}"
