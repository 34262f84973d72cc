"""daccore.rules.trust: the rules a buffer record must keep before dacd acts on it (pure)."""

import json
from typing import Any

import pytest

from daccore.errors import AdminError, UserError
from daccore.rules.trust import Untrusted, check_attachment, check_owner, parse_buffer
from daccore.settings.config import DacConfig

GiB = 1 << 30
KEY = "/dac/v1/buffers/42"


def config(min_owner_uid=1000):
    return DacConfig.model_validate(
        {
            "min_owner_uid": min_owner_uid,
            "pools": {"p": {"granularity": GiB}, "q": {"granularity": GiB}},
            "hosts": {
                "dac1": {
                    "bricks": [
                        {"device": "/dev/nvme0n1", "capacity": GiB, "pool": "p"},
                        {"device": "/dev/nvme1n1", "capacity": GiB, "pool": "q"},
                    ]
                }
            },
        }
    )


def doc(**changes):
    d = {
        "name": "42",
        "owner_uid": 1234,
        "owner_gid": 4321,
        "job_id": 42,
        "request": {"capacity": GiB, "pool": "p"},
        "allocation": {
            "primary_host": "dac1",
            "bricks": [{"host": "dac1", "brick": "nvme0n1", "device": "/dev/sda", "capacity": GiB}],
        },
    }
    for path, value in changes.items():
        *parents, last = path.split(".")
        target: Any = d
        for p in parents:
            target = target[p] if not p.isdigit() else target[int(p)]
        target[last] = value
    return json.dumps(d)


def test_a_sane_record_is_accepted_and_its_device_is_not_what_dacd_uses():
    buf = parse_buffer(KEY, doc(), config())
    assert buf.name == "42" and buf.allocation.bricks[0].brick == "nvme0n1"


@pytest.mark.parametrize(
    "changes,reason",
    [
        ({"owner_uid": 0}, "owner uid 0 is below min_owner_uid 1000"),
        ({"owner_gid": 0}, "owner gid 0 is below min_owner_uid 1000"),
        ({"owner_uid": 999}, "owner uid 999"),
        ({"name": "43"}, "names buffer '43'"),
        ({"attachments": {"{{ lookup('pipe', 'id') }}": ["n1"]}}, "attachments"),
        ({"attachments": {"42": ["{% set x = 1 %}"]}}, "attachments.42.0"),
        ({"attachments": {"42": ["n1 n2"]}}, "attachments.42.0"),
        ({"request.capacity": 1 << 62}, "request.capacity"),
        ({"request.capacity": 2 * GiB}, "more than its bricks hold"),
        ({"request.swap": GiB + 1}, "swap"),
        ({"request.pool": "nope"}, "pool 'nope' is not in this dacd's config"),
        ({"request.pool": "q"}, "is in pool 'p', not 'q'"),
        ({"allocation.bricks.0.brick": "sdb"}, "brick dac1:sdb is not in this dacd's config"),
        ({"allocation.bricks.0.capacity": GiB // 2}, "holds 1073741824 bytes"),
        (
            {"request.stage_in": [{"type": "file", "source": "a", "destination": "b"}] * 1001},
            "request.stage_in",
        ),
        (
            {"request.stage_in": [{"type": "file", "source": "a" * 4097, "destination": "b"}]},
            "request.stage_in.0.source",
        ),
    ],
)
def test_a_record_breaking_a_rule_is_untrusted_with_one_line_naming_key_and_rule(changes, reason):
    with pytest.raises(Untrusted) as e:
        parse_buffer(KEY, doc(**changes), config())
    assert str(e.value).startswith(f"{KEY}: ") and reason in str(e.value)
    assert "\n" not in str(e.value) and e.value.kind.value == "admin"


@pytest.mark.parametrize("text", [b"{not json", b"\xff\xfe", b"[]", b"null", b'{"name": "42"}'])
def test_what_is_not_a_buffer_record_is_untrusted(text):
    with pytest.raises(Untrusted, match=f"^{KEY}: "):
        parse_buffer(KEY, text, config())


def test_min_owner_uid_zero_lets_root_own_a_buffer():
    assert parse_buffer(KEY, doc(owner_uid=0, owner_gid=0), config(0)).owner_uid == 0
    with pytest.raises(UserError, match="below min_owner_uid 1"):
        check_owner(0, 0, 1)


def test_writers_refuse_attachments_dacd_would_refuse():
    check_attachment("42", ["node1", "n-2.x"])
    with pytest.raises(UserError, match="is not a number"):
        check_attachment("{{ 7 }}", ["node1"])
    with pytest.raises(AdminError, match="unusable node names"):
        check_attachment("42", ["{{ lookup('pipe', 'id') }}"])
