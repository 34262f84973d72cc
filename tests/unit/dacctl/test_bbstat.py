"""dac-bbstat (dacctl/bbstat.py over daccore/services/bbstat.py): `scontrol show dwstat [view]`
in Cray's dwstat layout, read from a real etcd holding a pool, a job buffer and a persistent
buffer; and what dac-bbstat refuses."""

import json
import time

import pytest
from records import host, pool

from daccore.records import buffer_doc
from daccore.records.states import State
from daccore.rules.directives import parse_script
from daccore.services import bbstat, jobs
from dacctl.bbstat import main

GIB = 2**30
#: 2026-11-27T10:00:00 UTC
CREATED = 1795773600
MOUNT_ROOT = "/var/opt/dac/mounts"


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def site(store, utc):
    """Pool `default` (1GiB bricks, two on each of dac1 and dac2); job 51's 2GiB buffer,
    mounted on node1 and node2 by both hosts; persistent `proj1` (1GiB, uid 1001) attached by
    job 51 too, made on its host with a failure reported."""
    store.ensure_pool(pool("default", granularity=GIB))
    keepers = []
    for h in ("dac1", "dac2"):
        store.register_host(host(h, 2, "default", capacity=GIB))
        keepers.append(store.keep_alive(h, 5))
    script = parse_script(
        "#!/bin/sh\n#DW jobdw capacity=2GiB access_mode=striped type=scratch\n", "DW"
    )
    jobs.create_job_buffer(store, 51, 1000, 1000, script, "default")
    jobs.create_persistent(store, "proj1", 1001, 1001, GIB, None, "striped", "scratch", "default")
    for name in ("51", "proj1"):
        doc = store.buffer_doc(name)
        store.update_buffer_doc({**doc.record, "created_at": CREATED + 0.7}, doc.mod_revision)
    jobs.attach(store, "51", ["node1", "node2"], ["proj1"])
    jobs.attach(store, "51", ["node1", "node2"], ["51"], State.MOUNTED)
    for name, state, error in (("51", "mounted", None), ("proj1", "created", "mkfs failed")):
        for h in buffer_doc.hosts(store.buffer_json(name)):
            store.client.put(
                store.keys.status(name, h),
                json.dumps(
                    {
                        "buffer": name,
                        "host": h,
                        "state": state,
                        "generation": store.buffer_json(name)["generation"],
                        "error": error and {"category": "internal", "message": error},
                    }
                ),
            )
    yield store
    for k in keepers:
        k.stop()


def storage_hosts(store, name):
    return len(buffer_doc.hosts(store.buffer_json(name)))


def test_dwstat_pools_is_crays_table_of_the_pools(site):
    assert bbstat.dwstat(site, "pools", MOUNT_ROOT).splitlines() == [
        "   pool units quantity free gran",
        "default bytes     4GiB 1GiB 1GiB",
    ]


def test_dwstat_sessions_has_one_session_per_buffer(site):
    assert bbstat.dwstat(site, "sessions", MOUNT_ROOT).splitlines() == [
        " sess state token creator owner             created expiration nodes",
        "   51 CA---    51   SLURM  1000 2026-11-27T10:00:00      never     2",
        "proj1 CAF-- proj1       -  1001 2026-11-27T10:00:00      never     2",
    ]


def test_dwstat_instances_are_the_buffers_storage(site):
    job, proj = storage_hosts(site, "51"), storage_hosts(site, "proj1")
    assert bbstat.dwstat(site, "instances", MOUNT_ROOT).splitlines() == [
        " inst state  sess bytes nodes             created expiration intact label public confs",
        f"   51 CA---    51  2GiB     {job} 2026-11-27T10:00:00      never   true I51-0  false "
        "    1",
        f"proj1 CAF-- proj1  1GiB     {proj} 2026-11-27T10:00:00      never   true proj1  false "
        "    1",
    ]


def test_dwstat_configurations_count_the_jobs_attached(site):
    assert bbstat.dwstat(site, "configurations", MOUNT_ROOT).splitlines() == [
        " conf state  inst    type activs",
        "   51 CA---    51 scratch      1",
        "proj1 CAF-- proj1 scratch      1",
    ]


def test_dwstat_activations_are_the_jobs_mounts(site):
    assert bbstat.dwstat(site, "activations", MOUNT_ROOT).splitlines() == [
        "   activ state  sess  conf nodes                                   mount",
        "   51:51 CA---    51    51     2          /var/opt/dac/mounts/51/striped",
        "proj1:51 CAF-- proj1 proj1     2 /var/opt/dac/mounts/51/persistent/proj1",
    ]


def test_dwstat_says_so_in_crays_words_when_there_is_nothing(store):
    assert [bbstat.dwstat(store, v, MOUNT_ROOT) for v in bbstat.VIEWS] == [
        "no pools",
        "no sessions",
        "no instances",
        "no scratch, cache, swap configurations",
        "no activations",
    ]


def test_a_buffer_in_teardown_is_flagged_destroyed():
    from daccore.services.dws import state_flags

    assert state_flags("deleted", [{"state": "mounted"}, {"state": "deleted"}], 1) == "D--T-"
    assert state_flags("deleted", [{"state": "deleted"}], 1) == "D----"
    assert state_flags("created", [{"state": "created"}, {}], 1) == "C----"


@pytest.mark.parametrize(
    "words",
    [
        ["hosts"],
        ["drain", "dac1"],
        ["--function", "pools"],
        ["sessions", "--all"],
        ["pools", "sessions"],
        ["fragments"],
        ["Sessions"],
        ["sessions\n"],
        ["51", "pools"],
        ["local", "down"],
    ],
)
def test_bbstat_refuses_all_but_a_job_id_or_a_view_in_one_line(words, capsys):
    assert main(words) == 0  # datawarp shows a failed GetSysStatus's output not at all
    out = capsys.readouterr()
    assert (
        out.out
        == "dac-bbstat: usage: scontrol show bbstat [job id | pools | sessions | "
        "instances | configurations | activations]\n"
        and out.err == ""
    )
