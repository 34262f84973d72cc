"""The answerer's pools summary, built once per mirror content (dacservice/answerer/answers.py
`_summary_per_change`): kept while what the mirror holds stays, built again when it changes
(an event on a mirrored key, a listing anew), never kept from a build that raised; and the
mirror's `changes` counter moves with its content, not with etcd's revision alone."""

import pytest

from daccore.etcd.types import KV, Event
from daccore.rules.inventory import Inventory
from dacservice.answerer.answers import _summary_per_change
from dacservice.answerer.mirror import Mirror, Unsure


class FakeMirror:
    changes = 1


class FakeStore:
    def __init__(self):
        self.builds = 0
        self.fail = False

    def summary_inventory(self):
        self.builds += 1
        if self.fail:
            raise Unsure("a read the mirror cannot answer")
        return Inventory({}, {}, {})


def test_one_build_per_mirror_content():
    mirror, store = FakeMirror(), FakeStore()
    memo = _summary_per_change(store, mirror)  # type: ignore[arg-type]
    first = memo.summary_inventory()
    assert memo.summary_inventory() is first and store.builds == 1
    mirror.changes = 2  # an event applied, or the mirror listed anew
    second = memo.summary_inventory()
    assert second is not first and store.builds == 2
    assert memo.summary_inventory() is second and store.builds == 2


def test_a_build_that_raised_is_not_kept():
    mirror, store = FakeMirror(), FakeStore()
    memo = _summary_per_change(store, mirror)  # type: ignore[arg-type]
    store.fail = True
    with pytest.raises(Unsure):
        memo.summary_inventory()
    store.fail = False
    kept = memo.summary_inventory()
    assert store.builds == 2 and memo.summary_inventory() is kept


def test_the_mirrors_changes_follow_its_content_not_etcds_revision():
    m = Mirror(None, "/dac")  # type: ignore[arg-type]  # never started: no etcd
    before = m.changes
    pool = m.keys.pools + "default"
    m._apply([Event("put", KV(pool, b"{}", 5, 5, 1))])
    assert m.changes == before + 1 and m.revision == 5
    elsewhere = m.keys.root + "not-mirrored/x"
    assert not m.covers(elsewhere, None)
    m._apply([Event("put", KV(elsewhere, b"{}", 6, 6, 1))])
    assert m.changes == before + 1 and m.revision == 6  # etcd moved; the content did not
    m._apply([Event("delete", KV(pool, b"", 0, 7, 0))])
    assert m.changes == before + 2
