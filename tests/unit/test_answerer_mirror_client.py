"""MirrorClient (dacservice/answerer/mirror.py) is a `daccore.etcd.types.EtcdApi`, as mypy
checks here, without a cast; it answers reads only: every other method of EtcdApi is `Unsure`
(the answer reads etcd), in one line naming the method."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dacservice.answerer.mirror import Mirror, MirrorClient, Unsure

if TYPE_CHECKING:
    from daccore.etcd.types import EtcdApi

#: each method of EtcdApi that is no read, with arguments for it
NOT_READS = {
    "put": ("/dac/pools/p", "{}"),
    "delete": ("/dac/pools/p",),
    "lease_grant": (10,),
    "lease_keepalive": (1,),
    "lease_time_to_live": (1,),
    "lease_revoke": (1,),
    "watch": ("/dac/",),
}


@pytest.mark.parametrize("method", sorted(NOT_READS))
def test_the_mirror_refuses_all_but_reads_in_one_line(method):
    mirror = Mirror(None, "/dac")  # type: ignore[arg-type]  # never started: no etcd
    client: EtcdApi = MirrorClient(mirror, ["http://127.0.0.1:2379"])
    with pytest.raises(Unsure) as e:
        getattr(client, method)(*NOT_READS[method])
    assert str(e.value) == f"the answerer's mirror answers reads only: {method}"
