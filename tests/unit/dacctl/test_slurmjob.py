"""The node list burst_buffer.lua hands pre_run from 23.02 (job_info.nodes), expanded."""

import pytest

from daccore.errors import AdminError
from daccore.services.slurmjob import expand_hostlist, job_nodes


@pytest.mark.parametrize(
    "hostlist,names",
    [
        ("node1", ["node1"]),
        ("node[1-2]", ["node1", "node2"]),
        ("node[1-3,5]", ["node1", "node2", "node3", "node5"]),
        ("cn[08-10],login1", ["cn08", "cn09", "cn10", "login1"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ],
)
def test_slurm_hostlists_expand_in_order(hostlist, names):
    assert expand_hostlist(hostlist) == names


@pytest.mark.parametrize(
    "bad", ["node[1-", "node]1", "node[x]", "node[3-1]", "n[[1]]", "n[1-999999999]"]
)
def test_anything_else_is_refused_with_one_line(bad):
    with pytest.raises(AdminError, match="node list"):
        expand_hostlist(bad)


def test_job_nodes_takes_the_list_and_drops_repeats():
    assert job_nodes("7", hostlist="node[1-2],node1") == ["node1", "node2"]
