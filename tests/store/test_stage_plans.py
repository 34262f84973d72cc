"""A stage split across a buffer's servers (issue 35): its plan `stageplans/<buffer>/<step>`,
written by the primary's dacd alone, fenced on its lease and on the spec's incarnation as a
status is; each share reported done in its host's own status; the views that say which servers
see the primary's filesystem; the stage's progress counted from each share's owner alone, so a
lost server's last figures are not counted twice; a server that does not find the plan's proof
at its fs_path copies nothing and says so, and the primary gives its shares to the others.
Real etcd."""

import os
import time

import pytest
from conftest import client_of
from records import buffer_maker, host, pool

from daccore.errors import BadRecord, Fenced, Superseded
from daccore.etcd.types import TRANSPORTS, EtcdRequestError
from daccore.records.models import ShareReport, StagePlan, State, Status
from daccore.services.buffers import allocate_buffer
from daccore.store import Store
from dacd.staging.reach import make_proof
from dacd.staging.run import Run
from dacd.staging.split_owners import run_owned
from dacd.staging.split_primary import Across
from daclocal.etcd_server import PREFIX


def plan(primary="h1", owners=("h1", "h2"), **kw):
    fields = dict(
        buffer="j1",
        step="stage_in",
        generation=2,
        attempt=1,
        primary=primary,
        fs_path="/fs/h1/j1",
        digest="0123456789abcdef0123456789abcdef",
        links=3,
        split=64 << 20,
        shares=[(100, 2), (90, 3)][: len(owners)] + [(0, 0)] * (len(owners) - 2),
        owners=list(owners),
    )
    return StagePlan(**{**fields, **kw})


def site(store, hosts=("h1", "h2"), ttl=5):
    store.ensure_pool(pool())
    keepers = {}
    for h in hosts:
        store.register_host(host(h, 2))
        keepers[h] = store.keep_alive(h, ttl)
    allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    return keepers


def test_a_plan_is_written_read_back_changed_and_dropped(store):
    keepers = site(store)
    incarnation = store.buffer("j1").create_revision
    first = plan()
    store.put_stage_plan(first, incarnation)
    assert store.stage_plan("j1", "stage_in") == first
    assert store.stage_plan("j1", "stage_out") is None
    key, text = store.stage_plan_text("j1", "stage_in")
    assert key == store.keys.stage_plan("j1", "stage_in") and StagePlan.model_validate_json(text)
    # a lost server's share given to another: the same key, owners changed
    taken = first.model_copy(update={"owners": ["h1", "h1"]})
    store.put_stage_plan(taken, incarnation)
    assert store.stage_plan("j1", "stage_in").owned_by("h1") == [0, 1]
    store.put_stage_plan(plan(step="stage_out"), incarnation)
    assert store.stage_plan_buffers() == ["j1"]
    store.drop_stage_plan("j1", "stage_in", "h1")
    assert store.stage_plan("j1", "stage_in") is None
    assert store.stage_plan("j1", "stage_out") is not None
    store.drop_stage_plans("j1", "h1")
    assert store.stage_plan_buffers() == []
    for k in keepers.values():
        k.stop()


def test_a_plan_is_small_whatever_the_tree(store):
    """No file list: tens of bytes a server, so 1,000 servers' shares fit etcd's 1.5 MiB."""
    owners = [f"server-{i:04d}" for i in range(1000)]
    big = plan(primary=owners[0], owners=owners, shares=[(1 << 50, 1 << 30)] * len(owners))
    assert len(big.model_dump_json()) < 64 * 1024


def test_a_plan_is_checked(store):
    with pytest.raises(ValueError, match="one host for each share"):
        plan(shares=[(1, 1), (2, 2), (3, 3)])
    with pytest.raises(ValueError):
        plan(digest="not hex")
    with pytest.raises(ValueError):
        plan(step="delete")
    store.client.put(store.keys.stage_plan("j1", "stage_in"), b'{"buffer": "j1"}')
    with pytest.raises(BadRecord):
        store.stage_plan("j1", "stage_in")


def test_the_plan_is_fenced_on_the_primarys_lease_and_on_the_spec(store):
    """A primary whose lease lapsed (frozen past its TTL: the buffer's other servers may
    already have taken its work over) writes no plan; nor does one that read a buffer since
    deleted or made anew under its name."""
    keepers = site(store, ttl=3)
    first = store.buffer("j1")
    store.put_stage_plan(plan(), first.create_revision)
    store.client.lease_revoke(keepers["h1"].lease)
    with pytest.raises(Fenced):
        store.put_stage_plan(plan(attempt=2), first.create_revision)
    assert store.stage_plan("j1", "stage_in").attempt == 1
    store.put_stage_plan(plan(primary="h2", owners=("h2", "h1")), first.create_revision)
    deadline = time.monotonic() + 10  # the keeper binds a new lease at its next refresh
    while True:
        try:
            store.put_stage_plan(plan(attempt=3), first.create_revision)
            break
        except Fenced:
            assert time.monotonic() < deadline, "no new lease bound"
            time.sleep(0.05)
    store.delete_buffer("j1", store.buffer("j1").mod_revision)
    with pytest.raises(Superseded):
        store.put_stage_plan(plan(attempt=4), first.create_revision)
    allocate_buffer(store, buffer_maker("j1", 100), capacity=100, pool="p")
    with pytest.raises(Superseded):
        store.put_stage_plan(plan(attempt=5), first.create_revision)
    assert store.stage_plan("j1", "stage_in").attempt == 3
    for k in keepers.values():
        k.stop()


def test_each_share_is_reported_in_its_hosts_own_status(store):
    keepers = site(store)
    incarnation = store.buffer("j1").create_revision
    report = ShareReport(step="stage_in", generation=2, attempt=1, done=[1])
    store.put_status(
        Status(buffer="j1", host="h2", state=State.STAGED_IN, share=report), incarnation
    )
    assert store.statuses("j1")["h2"].share == report
    failed = report.model_copy(update={"done": [], "failed": "/src/f: Permission denied"})
    store.put_status(Status(buffer="j1", host="h2", share=failed), incarnation)
    assert store.statuses("j1")["h2"].share.failed == "/src/f: Permission denied"
    # a status without one (every status before issue 35) still reads
    store.client.put(store.keys.status("j1", "h1"), b'{"buffer": "j1", "host": "h1"}')
    assert store.statuses("j1")["h1"].share is None
    for k in keepers.values():
        k.stop()


def test_views_say_which_servers_see_one_namespace(store):
    store.put_stage_view("h1", "boot-a:mnt:[1]")
    store.put_stage_view("h2", "boot-a:mnt:[1]")
    store.put_stage_view("h3", "boot-b:mnt:[1]")
    assert store.stage_views(["h1", "h2", "h3", "h4"]) == {
        "h1": "boot-a:mnt:[1]",
        "h2": "boot-a:mnt:[1]",
        "h3": "boot-b:mnt:[1]",
    }
    assert store.stage_views([f"x{i}" for i in range(150)] + ["h2"]) == {"h2": "boot-a:mnt:[1]"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_dacd_role_writes_plans_and_views_and_the_slurm_role_does_not(etcd_server, transport):
    """Under the real prefix, with etcd's RBAC as the local DAC grants it (docs/security.md)."""
    tag = f"plans{os.getpid()}{transport}"
    clients = {r: client_of(etcd_server, r, transport) for r in ("dacd", "slurm", "admin")}
    dacd, slurm, admin = (Store(clients[r], PREFIX) for r in ("dacd", "slurm", "admin"))
    try:
        dacd.put_stage_view(f"{tag}h1", "boot:mnt:[1]")
        dacd.put_stage_plan(plan(buffer=tag, primary=f"{tag}h1", owners=(f"{tag}h1", "h2")))
        read = slurm.stage_plan(tag, "stage_in")  # every role reads
        assert read is not None and read.primary == f"{tag}h1"
        for denied in (
            lambda: slurm.put_stage_view(f"{tag}h1", "x"),
            lambda: slurm.put_stage_plan(
                plan(buffer=tag, primary=f"{tag}h1", owners=(f"{tag}h1", "h2"))
            ),
        ):
            with pytest.raises(EtcdRequestError, match="permission denied"):
                denied()
        dacd.drop_stage_plans(tag, f"{tag}h1")
        assert admin.stage_plan(tag, "stage_in") is None
    finally:
        admin.client.delete(PREFIX + f"stage-views/{tag}h1")
        admin.drop_stage_plans(tag, f"{tag}h1")
        for c in clients.values():
            c.close()


def across(store, progress, fs_path="/fs/h1/j1"):
    buf = store.buffer("j1").record
    return Across(
        store,
        "h1",
        buf,
        "stage_in",
        fs_path,
        2,
        ["h1", "h2"],
        1,
        store.buffer("j1").create_revision,
        None,
        progress.append,
        lambda report: None,
        60,
        Run(),
    )


def test_a_share_is_counted_from_its_owner_alone(store):
    keepers = site(store)
    shown: list[dict] = []
    lead = across(store, shown)
    first = plan()
    lead._planned(first)
    theirs = ShareReport(step="stage_in", generation=2, attempt=1, parts=[(1, 50, 1, 10)])
    assert lead._theirs(first, "h2", theirs)
    assert not lead._theirs(first, "h2", theirs)  # the same figures: nothing moved
    lead.total.update(0, {"bytes_done": 100, "files_done": 2, "rate": 20})
    got = lead.total.sum()
    assert (got["bytes_done"], got["bytes_total"], got["files_total"]) == (150, 190, 5 + 3)
    assert got["rate"] == 30
    # h2 lost: its share 1 taken over by h1, which copies it again from its start
    started: list[int] = []
    lead._start = started.append
    lead._record(first)
    keepers["h2"].stop()
    store.client.delete(store.keys.alive_key("h2"))
    lead._take_over(first, {0}, set())
    taken = store.stage_plan("j1", "stage_in")
    assert taken.owners == ["h1", "h1"] and started == [1]
    lead._planned(taken)
    lead.total.update(1, {})  # what _start does
    assert not lead._theirs(taken, "h2", theirs)  # h2's last figures no longer count
    got = lead.total.sum()
    assert (got["bytes_done"], got["bytes_total"]) == (100, 190)
    keepers["h1"].stop()


def test_a_server_that_says_it_does_not_see_the_filesystem_has_its_shares_taken(store):
    keepers = site(store)
    lead = across(store, [])
    first = plan()
    started: list[int] = []
    lead._start = started.append
    lead._record(first)
    assert store.alive_among(["h2"]) == {"h2"}  # alive, but unreaching
    lead._take_over(first, set(), {"h2"})
    assert store.stage_plan("j1", "stage_in").owners == ["h1", "h1"] and started == [1]
    for k in keepers.values():
        k.stop()


def test_an_owner_without_the_proof_copies_nothing_and_says_unreached(store, tmp_path):
    keepers = site(store)
    primary, here = tmp_path / "primary", tmp_path / "here"
    primary.mkdir()
    here.mkdir()  # the mount point, nothing mounted on it
    planned = plan(proof=make_proof(str(primary)), fs_path=str(here))
    written: list[tuple[ShareReport, str]] = []
    report = ShareReport(step="stage_in", generation=2, attempt=1)
    buf = store.buffer("j1").record
    run = Run()
    run_owned(
        store,
        "h2",
        buf,
        planned,
        [1],
        str(here),
        2,
        60,
        run,
        report,
        lambda r, step: written.append((r, step)),
    )
    assert written == [(report.model_copy(update={"unreached": True}), "")]
    assert list(here.iterdir()) == [] and run.reason is None
    for k in keepers.values():
        k.stop()
