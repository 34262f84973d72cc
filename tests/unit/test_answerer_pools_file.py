"""The pools file's expiry and renewal (dacservice/answerer/publisher.py): written at any
moment, it is believed by burst_buffer.lua's rule (pools_file: 0 < expires - os.time() <= 2)
from the moment it is written until well after the writer renews it, whatever the fraction of
the second it was written in. Renewed a second after each write instead, a file written late in
a second expired before its renewal (so every hook in that gap asked the socket)."""

import math

from dacservice.answerer.publisher import PUBLISH_EVERY, pools_expiry, renewal


def believed(expires: int, t: float) -> bool:
    """burst_buffer.lua's pools_file, at wall time `t` (Lua 5.1's os.time(): whole seconds)."""
    left = expires - math.floor(t)
    return 0 < left <= 2


def test_a_file_is_believed_from_its_write_until_past_its_renewal():
    for i in range(1000):
        now = 1_800_000_000 + i / 997  # every fraction of a second, many seconds
        expires, renew = pools_expiry(now), renewal(now)
        assert now < renew <= now + 1.0
        # the writer looks every PUBLISH_EVERY: its renewal lands up to that late, and then
        # some more on a loaded machine; the file must still be believed at the latest moment
        latest = renew + PUBLISH_EVERY + 0.5
        for t in (now, (now + renew) / 2, renew, latest):
            assert believed(expires, t), (now, t)
        assert not believed(expires, renew + 1.0 + 1e-9)  # a stopped writer's is not, soon


def test_renewed_a_second_after_each_write_it_lapsed_before_its_renewal():
    now = 1_800_000_000.95  # written late in its second
    late = now + 1.0 + PUBLISH_EVERY  # the old rule's renewal, the writer's look as late as it gets
    assert not believed(pools_expiry(now), late)
    assert believed(pools_expiry(now), renewal(now) + PUBLISH_EVERY)
