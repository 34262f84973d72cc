"""Dealing a split stage's files into shares (dacd/staging/share.py): pure, no file touched."""

from typing import TYPE_CHECKING

from hypothesis import given, settings
from hypothesis import strategies as st

from dacd.staging import copier
from dacd.staging import share as copy_share
from dacd.staging.share import ALIGN, FILE_COST, SPLIT, deal, pieces, weight

if TYPE_CHECKING:
    from dacd.staging.copier import Pair

MiB = 1 << 20

#: (apparent size, data bytes): dense files, sparse ones, empty ones, some above the threshold
files_st = st.lists(
    st.integers(0, 3 * SPLIT).flatmap(lambda size: st.tuples(st.just(size), st.integers(0, size))),
    max_size=60,
)


def covered(files, shares):
    """Per file, its pieces in order of offset."""
    got: dict[int, list[tuple[int, int]]] = {}
    for share in shares:
        for i, start, end, _whole in share:
            got.setdefault(i, []).append((start, end))
    return {i: sorted(r) for i, r in got.items()}


@settings(max_examples=300, deadline=None)
@given(files_st, st.integers(1, 9))
def test_deal_covers_every_byte_of_every_file_exactly_once(files, n):
    shares = deal(files, n)
    assert len(shares) == n
    got = covered(files, shares)
    assert sorted(got) == list(range(len(files)))
    for i, ranges in got.items():
        assert ranges[0][0] == 0 and ranges[-1][1] == files[i][0]
        for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
            assert end == start  # no gap, no overlap
        assert all(start % ALIGN == 0 for start, _ in ranges)


@settings(max_examples=300, deadline=None)
@given(files_st, st.integers(1, 9))
def test_deal_keeps_shares_within_one_piece_of_each_other(files, n):
    shares = deal(files, n)
    loads = [weight(files, s) for s in shares]
    assert max(loads) - min(loads) <= SPLIT + ALIGN + FILE_COST


@settings(max_examples=100, deadline=None)
@given(files_st, st.integers(1, 9))
def test_deal_is_deterministic_and_marks_split_files(files, n):
    shares = deal(files, n)
    assert shares == deal(list(files), n)  # every server deals the same from the same walk
    for share in shares:
        assert share == sorted(share)  # walk order: a batch stays in one directory
        for i, start, end, whole in share:
            cut = files[i][1] > SPLIT and n > 1
            assert whole == ((start, end) == (0, files[i][0]) and not cut)


def test_one_server_gets_every_file_whole_in_walk_order():
    files = [(10 * SPLIT, 10 * SPLIT), (5, 5), (0, 0)]
    assert deal(files, 1) == [[(0, 0, 10 * SPLIT, True), (1, 0, 5, True), (2, 0, 0, True)]]


def test_a_very_large_file_is_spread_over_every_server():
    shares = deal([(64 << 30, 64 << 30)], 8)
    each = (64 << 30) // SPLIT // 8
    assert [weight([(64 << 30, 64 << 30)], s) for s in shares] == [(8 << 30) + each * FILE_COST] * 8


def test_a_huge_sparse_file_is_cut_by_its_data_not_its_size():
    assert pieces(8 << 60, 2 * MiB) == [(0, 8 << 60)]  # 8 EiB holding 2 MiB: whole
    cut = pieces(8 << 60, 3 * SPLIT)
    assert len(cut) == 3 and cut[-1][1] == 8 << 60


def test_the_share_plan_carries_its_role_and_refuses_another():
    pairs: list[Pair] = [{"type": "directory", "source": "/src", "destination": "/b/striped/in"}]
    data = copy_share.encode(pairs, "/b/striped", "destination", 3, "share", 4, 2, "ab", MiB)
    assert copy_share.decode(data) == (
        pairs,
        "/b/striped",
        "destination",
        3,
        copier.CHUNK,
        "share",
        4,
        2,
        "ab",
        MiB,
    )
    for bad in (
        data.replace(b"\0share\0", b"\0other\0"),
        data.replace(b"\x004\x002\x00", b"\x002\x004\x00"),
        b"dac-copier-plan/1\0x",
    ):
        try:
            copy_share.decode(bad)
        except copy_share.CopyError as e:
            assert str(e) == "copier failed: stdin holds no share plan"
        else:
            raise AssertionError(bad)
