"""The scheduler side's rules on a real etcd: what job_process refuses, and how attaching,
detaching and destroying change a buffer's spec (dacd then acts on it: tests/system)."""

import pytest
from records import host, pool

from daccore.errors import NotFound, UserError
from daccore.records.models import State
from daccore.rules.directives import parse_script
from daccore.services import jobs

SWAP_OFF = pool("noswap", granularity=100, backend="local", placement="single_host")
SWAP_ON = pool("swap", granularity=100, backend="local", placement="single_host", swap=True)
DAOS = pool("daos", granularity=100, backend="daos")


@pytest.fixture
def site(store):
    keepers = []
    for p, h in ((SWAP_OFF, "h1"), (SWAP_ON, "h2"), (DAOS, "h3")):
        store.ensure_pool(p)
        store.register_host(host(h, 4, pool_name=p.name))
        keepers.append(store.keep_alive(h, 5))
    yield store
    for k in keepers:
        k.stop()


def script(*lines):
    return parse_script("#!/bin/sh\n" + "".join(line + "\n" for line in lines), "DW")


@pytest.mark.parametrize(
    "lines,message",
    [
        (
            ["#DW jobdw capacity=100 pool=noswap", "#DW swap 50"],
            "line 3: swap: pool 'noswap' does not offer swap (the site turned it off)",
        ),
        (
            ["#DW jobdw capacity=200 pool=swap", "#DW swap 50"],
            "line 3: swap: the local backend holds swap files only in a one-brick buffer "
            "(xfs): btrfs "
            "cannot put a swap file across devices; ask for at most 100B or drop the swap line",
        ),
        (
            ["#DW jobdw capacity=100 pool=swap", "#DW swap 150"],
            "line 3: swap: 150B per node is more than the buffer's capacity 100B",
        ),
    ],
)
def test_job_process_refuses_swap_the_pool_cannot_give(site, lines, message):
    with pytest.raises(UserError) as e:
        jobs.validate(site, script(*lines), None)
    assert str(e.value) == message


@pytest.mark.parametrize("access", ["private", "striped,private"])
def test_job_process_refuses_private_mode_in_a_daos_pool(site, access):
    with pytest.raises(UserError) as e:
        jobs.validate(site, script(f"#DW jobdw capacity=100 pool=daos access_mode={access}"), None)
    assert str(e.value) == (
        f"line 2: jobdw: access_mode={access}: pool 'daos' cannot serve it: the daos backend has "
        "no private mode (a POSIX container is one namespace shared by the job's nodes): use "
        "access_mode=striped"
    )
    jobs.validate(site, script("#DW jobdw capacity=100 pool=daos access_mode=striped"), None)


def test_job_process_accepts_swap_in_a_one_brick_buffer_of_a_swap_pool(site):
    jobs.validate(site, script("#DW jobdw capacity=100 pool=swap", "#DW swap 50"), None)


def persistent(store, name="pbuf", uid=1000):
    jobs.create_persistent(store, name, uid, uid, 100, "swap", "striped", "scratch", None)
    return store.buffer(name).record


def test_persistent_buffers_are_striped_only(site):
    with pytest.raises(UserError, match="access 'private': persistent buffers are striped"):
        jobs.create_persistent(site, "pb", 1000, 1000, 100, "swap", "private", "scratch", None)


def test_attach_and_detach_change_the_spec_and_its_generation(site):
    before = persistent(site)
    jobs.attach(site, "7", ["n1", "n2"], ["pbuf"])
    jobs.attach(site, "8", ["n3"], ["pbuf"])
    after = site.buffer("pbuf").record
    assert after.attachments == {"7": ["n1", "n2"], "8": ["n3"]}
    assert after.generation == before.generation + 2
    assert after.desired_state is State.CREATED
    assert jobs.attached_by(site, "7") == ["pbuf"]
    jobs.attach(site, "7", ["n1", "n2"], ["pbuf"])  # Slurm repeats pre_run: no change
    assert site.buffer("pbuf").record.generation == after.generation
    jobs.detach(site, "7", ["pbuf"])
    assert site.buffer("pbuf").record.attachments == {"8": ["n3"]}
    with pytest.raises(NotFound, match="no persistent buffer named 'nope'"):
        jobs.attach(site, "7", ["n1"], ["nope"])


def test_destroy_is_refused_while_attached_and_for_another_user(site):
    persistent(site)
    jobs.attach(site, "7", ["n1"], ["pbuf"])
    with pytest.raises(UserError) as e:
        jobs.destroy(site, "pbuf")
    assert str(e.value) == (
        "destroy_persistent: buffer 'pbuf' is attached to job 7; destroy it once they end"
    )
    jobs.detach(site, "7", ["pbuf"])
    with pytest.raises(UserError, match="belongs to another user"):
        jobs.destroy(site, "pbuf", uid=2000)
    with pytest.raises(
        UserError, match="line 2: destroy_persistent: buffer 'pbuf' belongs to another user"
    ):
        jobs.validate(site, script("#BB destroy_persistent name=pbuf"), None, uid=2000)
    with pytest.raises(NotFound, match="line 2: destroy_persistent: no persistent buffer"):
        jobs.validate(site, script("#BB destroy_persistent name=other"), None, uid=1000)
    assert site.buffer("pbuf").record.desired_state is State.CREATED
    jobs.destroy(site, "pbuf", uid=1000)
    assert site.buffer("pbuf").record.desired_state is State.DELETED
    with pytest.raises(NotFound):
        jobs.destroy(site, "gone")


def test_destroy_asked_again_after_a_failed_delete_makes_a_new_generation(site):
    """dacd runs a failed delete again only for a new generation: destroying again (and
    Slurm's teardown, set_desired with retry) makes one; with no failure, nothing changes."""
    from daccore.records.models import Status, StatusError

    persistent(site)
    jobs.destroy(site, "pbuf")
    generation = site.buffer("pbuf").record.generation
    jobs.destroy(site, "pbuf")
    assert site.buffer("pbuf").record.generation == generation
    host_ = site.buffer("pbuf").record.allocation.primary_host
    site.put_status(
        Status(
            buffer="pbuf",
            host=host_,
            state=State.CREATED,
            generation=generation,
            error=StatusError(category="admin", message="still mounted"),
        )
    )
    jobs.destroy(site, "pbuf")
    assert site.buffer("pbuf").record.generation == generation + 1


def test_a_buffer_being_torn_down_is_never_brought_back(site):
    persistent(site)
    jobs.destroy(site, "pbuf")
    with pytest.raises(UserError, match="buffer 'pbuf' is being torn down"):
        jobs.attach(site, "7", ["n1"], ["pbuf"])
    with pytest.raises(UserError, match="buffer 'pbuf' is being torn down"):
        jobs.set_desired(site, "pbuf", State.MOUNTED)
    jobs.detach(site, "7", ["pbuf"])  # nothing attached: no change, no error
    assert site.buffer("pbuf").record.desired_state is State.DELETED


def test_a_persistentdw_of_a_buffer_not_made_yet_is_accepted_and_awaited(site):
    """Slurm's tests submit the job that uses a persistent buffer before the job that makes
    it: job_process accepts it, setup waits for the buffer (burst_buffer/lua; datawarp holds
    the job itself until the buffer exists)."""
    attach = script("#DW persistentdw name=pbuf")
    jobs.validate(site, attach, None)
    jobs.validate(site, attach, None, uid=1000)
    with pytest.raises(NotFound) as e:
        jobs.await_persistent(site, attach, 0.3, "7")
    assert str(e.value) == (
        "line 2: persistentdw: no persistent buffer named 'pbuf' yet "
        "(waited 0s); create it, then release the job (scontrol release 7)"
    )
    import threading

    made = threading.Timer(0.5, persistent, args=(site,))
    made.start()
    jobs.await_persistent(site, attach, 30, "7")  # returns once it is made
    made.join()
    assert site.buffer("pbuf") is not None
    jobs.validate(site, attach, None, uid=1000, at_setup=True)
    # made, and someone else's: still refused at submission when Slurm says who submits
    with pytest.raises(UserError) as refused:
        jobs.validate(site, attach, None, uid=2000)
    assert str(refused.value) == (
        "line 2: persistentdw: persistent buffer 'pbuf' belongs to another user"
    )


def test_a_delete_that_keeps_failing_runs_again_less_and_less_often(site):
    """Issue 45: Slurm retries a failed teardown every few seconds for as long as it fails,
    and each retry cost a storage host a delete run (Ansible, a /proc scan, the owner's
    processes stopped). A retry due within a second waits for it; one due later answers the
    last failure at once, saying when the next run is, and makes no new generation (so dacd
    runs nothing)."""
    import time

    from daccore.errors import AdminError
    from daccore.records.lifecycle import retry_after
    from daccore.records.models import Status, StatusError

    assert [retry_after(n) for n in (1, 2, 3, 4, 9, 10, 50)] == [1, 2, 4, 8, 256, 300, 300]
    persistent(site)
    jobs.destroy(site, "pbuf")
    host_ = site.buffer("pbuf").record.allocation.primary_host

    def failed(attempt, ago):
        site.put_status(
            Status(
                buffer="pbuf",
                host=host_,
                state=State.CREATED,
                generation=site.buffer("pbuf").record.generation,
                step="delete",
                attempt=attempt,
                updated_at=time.time() - ago,
                error=StatusError(category="admin", message="still mounted"),
            )
        )

    generation = site.buffer("pbuf").record.generation
    failed(1, 0.5)
    t = time.monotonic()
    jobs.set_desired(site, "pbuf", State.DELETED, retry=True)  # due in 0.5 s: waited for
    assert 0.3 < time.monotonic() - t < 1.0
    assert site.buffer("pbuf").record.generation == generation + 1
    failed(3, 1)  # due 4 s after the third failure
    for retry in (
        lambda: jobs.set_desired(site, "pbuf", State.DELETED, retry=True),
        lambda: jobs.destroy(site, "pbuf"),
    ):
        with pytest.raises(AdminError) as e:
            retry()
        assert str(e.value) == (
            "buffer pbuf: still mounted (failed 3 times; the next try is in 3 s)"
        )
        assert site.buffer("pbuf").record.generation == generation + 1
    failed(3, 5)  # due now
    jobs.set_desired(site, "pbuf", State.DELETED, retry=True)
    assert site.buffer("pbuf").record.generation == generation + 2


def test_a_users_buffers_whose_teardown_fails_count_against_that_user_alone(site):
    """Issue 45: one user's jobs each left a descriptor in flight, every teardown failed, and
    the whole pool was held while everyone else's jobs pended. A buffer whose delete failed
    counts against its owner's held_share: past it, that owner's new buffers in the pool are
    refused (one line), another user's are not; a teardown under way (no failure) is not
    counted, nor is another pool."""
    from daccore.errors import CapacityError
    from daccore.records.models import Status, StatusError

    one_brick = script("#DW jobdw capacity=100 pool=noswap")  # 1 of h1's 4 bricks
    assert jobs.create_job_buffer(site, 71, 1000, 1000, one_brick, None, held_share=0.25)
    jobs.set_desired(site, "71", State.DELETED)
    # a teardown under way: nothing failed yet, so nothing is held against uid 1000
    assert jobs.create_job_buffer(site, 72, 1000, 1000, one_brick, None, held_share=0.25)
    jobs.set_desired(site, "72", State.DELETED)
    record = site.buffer("71").record
    site.put_status(
        Status(
            buffer="71",
            host=record.allocation.primary_host,
            state=State.CREATED,
            generation=record.generation,
            step="delete",
            error=StatusError(category="admin", message="still mounted"),
        )
    )
    with pytest.raises(CapacityError) as e:
        jobs.create_job_buffer(site, 73, 1000, 1000, one_brick, None, held_share=0.25)
    assert str(e.value) == (
        "pool 'noswap': your buffers 71 still hold 100B, their teardown failing (dacctl show "
        "<name> says what holds them); with this one they would pass the 25% of the pool "
        "(100B) one user's such buffers may hold (held_share in dac.yaml): end what holds them"
    )
    with pytest.raises(CapacityError, match="your buffers 71 still hold"):
        jobs.create_persistent(
            site, "p73", 1000, 1000, 100, "noswap", "striped", "scratch", None, held_share=0.25
        )
    assert site.buffer("73") is None and site.buffer("p73") is None
    assert jobs.create_job_buffer(site, 74, 2000, 2000, one_brick, None, held_share=0.25)
    swap = script("#DW jobdw capacity=100 pool=swap")  # another pool: nothing held there
    assert jobs.create_job_buffer(site, 75, 1000, 1000, swap, None, held_share=0.25)
    # a site that sets no bound (held_share: 1)
    assert jobs.create_job_buffer(site, 76, 1000, 1000, one_brick, None, held_share=1.0)
