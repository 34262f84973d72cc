"""dacd's reconciler works on the buffers holding a brick of its host, found by its claims
(issue 20): at start it lists its claims, not every buffer; a spec change of another host's
buffer costs it no read; a buffer arriving or leaving is seen through its claims' watch. The
real Reconciler against the real etcd, with a backend that only records the step. And a step's
progress line etcd does not take fails no step."""

import json
import threading
import time

import pytest
from records import buffer_maker

from daccore.errors import StoreUnavailable
from daccore.etcd.types import put_op
from daccore.records.models import State
from daccore.records.states import State as S
from daccore.services.buffers import allocate_buffer
from daccore.services.jobs import set_desired
from daccore.settings.config import DacConfig
from daccore.store import Store
from dacd.reconciler import Reconciler

HOSTS = ("h1", "h2", "h3")


def config():
    return DacConfig.model_validate(
        {
            "pools": {"p": {"granularity": 100, "backend": "local"}},
            "hosts": {
                h: {
                    "bricks": [
                        {"device": f"/dev/{h}-{i}", "capacity": 100, "pool": "p", "name": f"b{i}"}
                        for i in range(2)
                    ]
                }
                for h in HOSTS
            },
        }
    )


class Server:
    """One storage server's reconciler, counting the specs it reads."""

    def __init__(self, store, cfg, host):
        self.store = Store(store.client, store.keys.root)
        self.reads: list[str] = []
        real = self.store.buffer_text

        def counted(name):
            self.reads.append(name)
            return real(name)

        self.store.buffer_text = counted  # type: ignore[method-assign]  # counting reads
        self.steps: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.rec = Reconciler(self.store, cfg, host, self.run_step)

    def run_step(
        self, backend, step, host, variables, on_task, inventory=None, forks=None, ssh=None
    ):
        with self.lock:
            self.steps.append((variables["buffer"], step))


def wait(what, fn, timeout=20):
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def reached(store, name, host, state):
    s = store.status_docs(name).get(host)
    return s is not None and s.get("state") == state.value and not s.get("step")


def test_each_dacd_reads_only_the_buffers_on_its_host(store):
    cfg = config()
    from dacd.registration import host_record, pool_records

    for p in pool_records(cfg):
        store.ensure_pool(p)
    for h in HOSTS:
        store.register_host(host_record(h, cfg.hosts[h]))
        store.client.put(store.keys.alive_key(h), "")
    # one buffer before the servers start: only its host's dacd looks at it
    early, _ = allocate_buffer(store, buffer_maker("early", 200), capacity=200, pool="p")
    servers = {h: Server(store, cfg, h) for h in HOSTS}
    try:
        for s in servers.values():
            s.rec.start()
        home = early.allocation.primary_host
        wait("early to be created", lambda: reached(store, "early", home, S.CREATED))
        for h, s in servers.items():
            assert (("early", "create") in s.steps) == (h == home)
            assert set(s.reads) <= ({"early"} if h == home else set())
        # a buffer arriving while they run: seen through its host's claim watch
        late, _ = allocate_buffer(store, buffer_maker("late", 100), capacity=100, pool="p")
        there = late.allocation.primary_host
        wait("late to be created", lambda: reached(store, "late", there, S.CREATED))
        # spec changes: only the host of each reads it
        for _ in range(3):
            set_desired(store, "late", State.STAGED_IN)
            set_desired(store, "late", State.CREATED)
        set_desired(store, "late", State.DELETED)
        set_desired(store, "early", State.DELETED)
        wait(
            "both to be reaped",
            lambda: store.buffer("late") is None and store.buffer("early") is None,
        )
        assert store.claims() == {}
        for h, s in servers.items():
            mine = {n for n, host in (("early", home), ("late", there)) if host == h}
            assert set(s.reads) == mine, (h, s.reads)
            assert {b for b, step in s.steps if step == "delete"} == mine
    finally:
        for s in servers.values():
            s.rec.stop(timeout=5)


def test_where_the_primary_runs_every_step_the_other_hosts_never_read_the_buffer(store):
    """lustre: the buffer's claims name its primary, so the dacd of its other hosts leave it
    alone without reading its spec, however often it changes."""
    cfg = site_of(store, "lustre")
    servers = {h: Server(store, cfg, h) for h in HOSTS}
    try:
        for s in servers.values():
            s.rec.start()
        buf, _ = allocate_buffer(store, buffer_maker("wide", 300, "p"), capacity=300, pool="p")
        assert len(buf.allocation.hosts) == 3
        primary = buf.allocation.primary_host
        wait(
            "wide to be created everywhere",
            lambda: all(reached(store, "wide", h, S.CREATED) for h in HOSTS),
        )
        set_desired(store, "wide", State.DELETED)
        wait("wide to be reaped", lambda: store.buffer("wide") is None)
        for h, s in servers.items():
            assert set(s.reads) == ({"wide"} if h == primary else set()), (h, s.reads)
    finally:
        for s in servers.values():
            s.rec.stop(timeout=5)


LUSTRE = {
    "granularity": 100,
    "backend": "lustre",
    "lustre": {
        "mgs": {"host": "mgs0", "nid": "10.0.0.1@tcp"},
        "lnet_suffix": "@tcp",
        "mdt_size": 10,
    },
}


def site_of(store, backend, placement=None):
    local = {"granularity": 100, "backend": backend}
    if placement:
        local["placement"] = placement
    cfg = DacConfig.model_validate(
        {
            "pools": {"p": LUSTRE if backend == "lustre" else local},
            "hosts": {
                h: {
                    "bricks": [
                        {"device": f"/dev/{h}-{i}", "capacity": 100, "pool": "p", "name": f"b{i}"}
                        for i in range(2)
                    ]
                }
                for h in HOSTS
            },
        }
    )
    from dacd.registration import host_record, pool_records

    for p in pool_records(cfg):
        store.ensure_pool(p)
    for h in HOSTS:
        store.register_host(host_record(h, cfg.hosts[h]))
        store.client.put(store.keys.alive_key(h), "")
    return cfg


def claims_told_late(server, seconds):
    """`server`'s claims watch tells of another primary's claim (a passive one) `seconds`
    late: its work watch, a second watch with no order against the first, may tell of a
    wake-up for that buffer first (seen in CI under load)."""
    real = server.store.watch_host_claims

    def watch(host, pool, revision):
        w, changes = real(host, pool, revision)

        def late():
            for c in changes:
                if c.record is not None and c.record[1] not in (None, host):
                    time.sleep(seconds)
                yield c

        return w, late()

    server.store.watch_host_claims = watch


@pytest.mark.parametrize("late", [False, True], ids=["in-order", "claim-after-wake"])
def test_a_lustre_buffers_other_host_reads_it_only_when_its_work_key_is_put(store, late):
    """lustre: another host of the buffer reads its spec only when woken through its own
    work key (a split stage's primary puts it when its plan names the host: issue 35), never
    at a spec change; a host not woken never reads it; the woken host takes no step of its
    own (the primary runs them all). A wake-up that comes before the claim's own event is
    acted on when the claim comes, not lost."""
    cfg = site_of(store, "lustre")
    servers = {h: Server(store, cfg, h) for h in HOSTS}
    if late:
        for s in servers.values():
            claims_told_late(s, 4.0)
    try:
        for s in servers.values():
            s.rec.start()
        buf, _ = allocate_buffer(store, buffer_maker("wake", 300, "p"), capacity=300, pool="p")
        primary = buf.allocation.primary_host
        wait(
            "wake to be created everywhere",
            lambda: all(reached(store, "wake", h, S.CREATED) for h in HOSTS),
        )
        for _ in range(2):
            set_desired(store, "wake", State.MOUNTED)
            set_desired(store, "wake", State.CREATED)
        woken, silent = sorted(set(HOSTS) - {primary})
        assert servers[woken].reads == [] and servers[silent].reads == []
        if late:  # the claim still on its way: the wake-up comes first
            assert not servers[woken].rec._claims.passive_holds("wake")
        store.wake(woken, "wake")
        wait("the woken host to read the spec", lambda: servers[woken].reads == ["wake"])
        time.sleep(0.5)
        assert servers[woken].reads == ["wake"] and servers[silent].reads == []
        assert servers[woken].steps == [] and servers[silent].steps == []
        set_desired(store, "wake", State.DELETED)
        wait("wake to be reaped", lambda: store.buffer("wake") is None)
        assert servers[woken].reads == ["wake"] and servers[silent].reads == []
    finally:
        for s in servers.values():
            s.rec.stop(timeout=5)


class WorkWatch:
    """The buffers whose work key of `host` was put, as that host's dacd sees them."""

    def __init__(self, store, host, revision):
        self.seen: list[str] = []
        self.watch, changes = store.watch_host_work(host, revision + 1)

        def follow():
            try:
                for c in changes:
                    if c.record is not None:
                        self.seen.append(c.name)
            except Exception:  # noqa: BLE001 - closed
                pass

        threading.Thread(target=follow, daemon=True).start()


@pytest.mark.parametrize("backend", ["local", "lustre"])
def test_a_desired_state_change_reaches_only_the_acting_hosts_work_watch(store, backend):
    """local: every host of the buffer runs its own steps, so each is woken; lustre: the
    primary runs them for all, so it alone is. A third host, holding no brick, never is."""
    cfg = site_of(store, backend)
    from daccore.services.buffers import allocation_of

    inv = store.inventory()
    bricks = [inv.free_bricks("p")[h][0] for h in HOSTS[:2]]
    store.create_buffer(buffer_maker("two", 200)(allocation_of(bricks)))
    primary = store.buffer("two").record.allocation.primary_host
    acting = {"h1", "h2"} if backend == "local" else {primary}
    servers = {h: Server(store, cfg, h) for h in HOSTS}
    try:
        for s in servers.values():
            s.rec.start()
        wait(
            "two to be created",
            lambda: all(reached(store, "two", h, S.CREATED) for h in ("h1", "h2")),
        )
        wait("the workers to be done", lambda: all(idle(s.rec, "two") for s in servers.values()))
        revision = store.buffer("two").mod_revision
        watches = {h: WorkWatch(store, h, revision) for h in HOSTS}
        reads = {h: len(s.reads) for h, s in servers.items()}
        set_desired(store, "two", State.STAGED_IN)
        wait("the acting hosts' watches", lambda: all(watches[h].seen for h in acting))
        wait(
            "two to be staged in",
            lambda: all(reached(store, "two", h, S.STAGED_IN) for h in ("h1", "h2")),
        )
        time.sleep(0.3)  # time enough for a stray event to arrive
        for h in HOSTS:
            assert watches[h].seen == (["two"] if h in acting else []), h
            assert (len(servers[h].reads) > reads[h]) == (h in acting), h
            watches[h].watch.close()
        set_desired(store, "two", State.DELETED)  # gone: dacd's metrics forget it
        wait("two to be reaped", lambda: store.buffer("two") is None)
    finally:
        for s in servers.values():
            s.rec.stop(timeout=5)


def idle(rec, name):
    with rec._intake._lock:
        return name not in rec._intake._busy


def test_stray_work_is_dropped_at_start_and_a_change_without_work_is_found_by_resync(store):
    cfg = site_of(store, "local")
    buf, _ = allocate_buffer(store, buffer_maker("held", 100), capacity=100, pool="p")
    home = buf.allocation.primary_host
    store.client.put(store.keys.work(home, "ghost"), "1")  # a buffer that is gone
    server = Server(store, cfg, home)
    server.rec._intake.resync_every = 3600  # only the explicit call below
    try:
        server.rec.start()
        wait("held to be created", lambda: reached(store, "held", home, S.CREATED))
        # reconcile() reads the spec again after each step: a change written before it is
        # done would be seen without a work key
        wait("held's worker to be done", lambda: idle(server.rec, "held"))
        assert store.client.get(store.keys.work(home, "ghost")) is None
        # a spec changed by a writer that wrote no work key (by hand): unseen until resync
        current = store.buffer_doc("held")
        doc = {
            **current.record,
            "desired_state": "staged_in",
            "generation": current.record["generation"] + 1,
        }
        store.client.txn([], [put_op(store.keys.buffer("held"), json.dumps(doc))])
        time.sleep(0.5)
        assert not reached(store, "held", home, S.STAGED_IN)
        server.rec.resync()
        wait("held to be staged in", lambda: reached(store, "held", home, S.STAGED_IN))
        set_desired(store, "held", State.DELETED)
        wait("held to be reaped", lambda: store.buffer("held") is None)
    finally:
        server.rec.stop(timeout=5)


def test_a_progress_line_etcd_did_not_take_fails_no_step(store):
    """A step reports its task while etcd refuses that one write: the step goes on and its
    outcome is written (a progress line is shown when etcd takes it)."""
    cfg = config()
    from dacd.registration import host_record, pool_records

    for p in pool_records(cfg):
        store.ensure_pool(p)
    for h in HOSTS:
        store.register_host(host_record(h, cfg.hosts[h]))
        store.client.put(store.keys.alive_key(h), "")
    buf, _ = allocate_buffer(store, buffer_maker("b", 100), capacity=100, pool="p")
    host = buf.allocation.primary_host
    mine = Store(store.client, store.keys.root)
    refused: list[str] = []
    real = mine.put_status

    def put_status(status, incarnation):
        if status.step and ": " in status.step:  # a task's line: etcd out of reach
            refused.append(status.step)
            raise StoreUnavailable(store.client.endpoints, "connection refused", 5.0)
        return real(status, incarnation)

    mine.put_status = put_status  # type: ignore[method-assign,assignment]  # etcd refusing one write
    ran = threading.Event()

    def run_step(backend, step, host, variables, on_task, inventory=None, forks=None, ssh=None):
        on_task("format the bricks")
        ran.set()

    rec = Reconciler(mine, cfg, host, run_step)
    rec.start()
    try:
        wait("b to be created", lambda: reached(store, "b", host, S.CREATED))
        assert ran.is_set() and refused == ["create: format the bricks"]
        status = store.status_docs("b")[host]
        assert status.get("error") is None and status["state"] == S.CREATED.value
    finally:
        rec.stop(timeout=5)


def test_a_host_that_said_it_does_not_see_the_filesystem_is_not_handed_its_shares_again(store):
    """A split stage's owner that did not find the plan's proof said `unreached` in its report
    (issue 35): until the primary gives its shares to others, a pass over the buffer must not
    hand them to the stage pool again (each hand-off would look for the proof and write the
    status once more, in a loop); one that said nothing is handed its share."""
    from daccore.backends import get as get_backend
    from daccore.records.models import ShareReport, StagePlan, Status

    cfg = site_of(store, "local", "across_servers")
    buf, _ = allocate_buffer(store, buffer_maker("ur", 200, "p"), capacity=200, pool="p")
    set_desired(store, "ur", State.STAGED_IN)
    held = store.buffer("ur")
    buf = held.record
    primary = buf.allocation.primary_host
    other = sorted(set(buf.allocation.hosts) - {primary})[0]
    fs_path = get_backend("local", cfg, primary).variables(buf, "stage_in")["fs_path"]
    plan = StagePlan(
        buffer="ur",
        step="stage_in",
        generation=buf.generation,
        attempt=1,
        primary=primary,
        fs_path=fs_path,
        digest="0123456789abcdef0123456789abcdef",
        split=64 << 20,
        shares=[(100, 1), (100, 1)],
        owners=[primary, other],
        proof="ab" * 16,
    )
    store.client.put(store.keys.stage_plan("ur", "stage_in"), plan.model_dump_json())
    rec = Reconciler(Store(store.client, store.keys.root), cfg, other, lambda *a, **k: None)
    rec._shares.view = "a view"
    handed: list = []
    rec._shares._hand_off = lambda *a: handed.append(a)  # type: ignore[method-assign]
    said = ShareReport(step="stage_in", generation=buf.generation, attempt=1, unreached=True)
    mine = Status(buffer="ur", host=other, share=said)
    assert rec._shares.due(buf, held.create_revision, mine, "local") is False and handed == []
    assert rec._shares.due(buf, held.create_revision, None, "local") is True
    assert [a[4] for a in handed] == [[1]]  # its one share, to the stage pool
