"""dacctl/datawarp.py `show`: the show_sessions, show_instances and show_configurations JSON as
burst_buffer/datawarp reads it (issue 45: string ids read as 0 gave every buffer Slurm had not
made the bytes of every instance). Read from a real etcd holding a job buffer and two
persistent buffers."""

import argparse
import json

import pytest
from records import host, pool

from daccore.rules.directives import parse_script
from daccore.services import jobs
from dacctl import datawarp

GIB = 2**30


@pytest.fixture
def site(store):
    """Pool `default` (1GiB bricks, four on each of dac1 and dac2); job 51's 2GiB buffer,
    persistent `proj1` (1GiB, uid 1001) and `proj2` (1GiB, uid 1002)."""
    store.ensure_pool(pool("default", granularity=GIB))
    keepers = []
    for h in ("dac1", "dac2"):
        store.register_host(host(h, 4, "default", capacity=GIB))
        keepers.append(store.keep_alive(h, 5))
    script = parse_script("#!/bin/sh\n#DW jobdw capacity=2GiB access_mode=striped\n", "DW")
    jobs.create_job_buffer(store, 51, 1000, 1000, script, "default")
    for name, uid in (("proj1", 1001), ("proj2", 1002)):
        jobs.create_persistent(store, name, uid, uid, GIB, None, "striped", "scratch", "default")
    yield store
    for k in keepers:
        k.stop()


def show(store, function: str) -> list[dict]:
    out = datawarp.show(argparse.Namespace(function=function), {}, store)
    return json.loads(out)[function.removeprefix("show_")]


def slurm_sizes(sessions: list[dict], instances: list[dict]) -> dict[str, int]:
    """Token -> size, as burst_buffer/datawarp's `_load_state` sizes a session it has no record
    of (22.05 to 26.05): ids are read only when they are JSON integers (anything else stays 0),
    and a session gets the bytes of every instance linked to its id."""

    def number(value) -> int:
        return value if type(value) is int else 0

    return {
        s["token"]: sum(
            i["capacity"]["bytes"]
            for i in instances
            if number(i["links"]["session"]) == number(s["id"])
        )
        for s in sessions
    }


def test_slurm_sizes_each_buffer_at_its_own_bytes(site):
    sessions, instances = show(site, "show_sessions"), show(site, "show_instances")
    assert slurm_sizes(sessions, instances) == {"51": 2 * GIB, "proj1": GIB, "proj2": GIB}


def test_every_id_slurm_reads_is_a_distinct_32_bit_integer(site):
    sessions = show(site, "show_sessions")
    instances = show(site, "show_instances")
    configurations = show(site, "show_configurations")
    ids = [s["id"] for s in sessions]
    assert all(type(i) is int and 0 <= i < 2**32 for i in ids) and len(set(ids)) == 3
    # one instance and one configuration per session, under the session's number
    assert [(i["id"], i["links"]["session"]) for i in instances] == [(i, i) for i in ids]
    assert [(c["id"], c["links"]["instance"]) for c in configurations] == [(i, i) for i in ids]
    assert [(s["token"], s["owner"], type(s["created"])) for s in sessions] == [
        ("51", 1000, int),
        ("proj1", 1001, int),
        ("proj2", 1002, int),
    ]
    assert [i["capacity"]["nodes"] for i in instances] == [2, 1, 1]


def test_a_buffer_keeps_its_id_until_it_is_made_again(site):
    """Slurm reads show_sessions and show_instances in two calls, between which buffers come
    and go: an id stays the buffer's for as long as its spec lives, and a buffer made again
    under the same name is numbered anew."""
    before = {s["token"]: s["id"] for s in show(site, "show_sessions")}
    spec = site.buffer_doc("proj2")
    site.delete_buffer("proj2", spec.mod_revision)
    jobs.create_persistent(site, "proj3", 1001, 1001, GIB, None, "striped", "scratch", "default")
    after = {s["token"]: s["id"] for s in show(site, "show_sessions")}
    assert {k: after[k] for k in ("51", "proj1")} == {k: before[k] for k in ("51", "proj1")}
    jobs.create_persistent(site, "proj2", 1002, 1002, GIB, None, "striped", "scratch", "default")
    again = {s["token"]: s["id"] for s in show(site, "show_sessions")}
    assert again["proj2"] not in before.values() and len(set(again.values())) == 4
    assert slurm_sizes(show(site, "show_sessions"), show(site, "show_instances")) == {
        "51": 2 * GIB,
        "proj1": GIB,
        "proj2": GIB,
        "proj3": GIB,
    }


def test_an_id_is_the_create_revision_as_slurm_keeps_it_in_32_bits():
    assert datawarp._dws_id(7) == 7 and datawarp._dws_id(2**32 + 7) == 7
