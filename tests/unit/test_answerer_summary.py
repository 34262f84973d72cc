"""The answerer's pools summary, built once per mirror content (dacservice/answerer.py
`_summary_per_revision`): kept while the mirror's revision and listings stay, built again when
either moves, and never kept from a build that raised."""

import pytest

from dacservice.answerer import _summary_per_revision
from dacservice.mirror import Unsure


class FakeMirror:
    revision, loads = 5, 1


class FakeStore:
    def __init__(self):
        self.builds = 0
        self.fail = False

    def summary_inventory(self):
        self.builds += 1
        if self.fail:
            raise Unsure("a read the mirror cannot answer")
        return object()


def test_one_build_per_mirror_content():
    mirror, store = FakeMirror(), FakeStore()
    memo = _summary_per_revision(store, mirror)  # type: ignore[arg-type]
    first = memo.summary_inventory()
    assert memo.summary_inventory() is first and store.builds == 1
    mirror.revision = 6  # an event applied, or a probe's confirmation
    second = memo.summary_inventory()
    assert second is not first and store.builds == 2
    mirror.loads = 2  # listed anew at the same revision (another etcd behind the endpoint)
    assert memo.summary_inventory() is not second and store.builds == 3


def test_a_build_that_raised_is_not_kept():
    mirror, store = FakeMirror(), FakeStore()
    memo = _summary_per_revision(store, mirror)  # type: ignore[arg-type]
    store.fail = True
    with pytest.raises(Unsure):
        memo.summary_inventory()
    store.fail = False
    kept = memo.summary_inventory()
    assert store.builds == 2 and memo.summary_inventory() is kept
