import socket
import time
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from daccore.errors import AdminError, PlaybookFailed, StoreUnavailable, UserError
from daccore.records.models import State
from daccore.rules.inventory import ClaimCounts, HostView, Inventory, PoolInfo
from daccore.settings.config import DacConfig
from dacd import metrics


def value(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    "address,parsed",
    [
        ("127.0.0.1:9560", ("127.0.0.1", 9560)),
        ("[::1]:9560", ("::1", 9560)),
        ("dac-e-1.example.org:1", ("dac-e-1.example.org", 1)),
    ],
)
def test_split_address_takes_host_and_port_and_the_config_agrees(address, parsed):
    assert metrics.split_address(address) == parsed
    assert DacConfig(metrics_address=address).metrics_address == address


@pytest.mark.parametrize(
    "address", ["9560", ":9560", "host:0", "host:65536", "http://h:1", "h:95a0"]
)
def test_split_address_refuses_anything_but_host_port(address):
    with pytest.raises(AdminError, match=f"metrics address '{address}': must be host:port"):
        metrics.split_address(address)


def test_the_config_refuses_a_metrics_address_without_a_port():
    with pytest.raises(ValueError, match="metrics_address"):
        DacConfig(metrics_address="9560")
    assert DacConfig().metrics_address == ""  # off by default


def status(state=None, error=None, generation=1):
    return SimpleNamespace(state=state, error=error, generation=generation)


def test_a_buffer_counts_under_the_state_reached_new_before_any_and_failed_after_a_failure():
    def label(s):
        return metrics.buffer_state_label(s, 1)

    assert label(None) == "new" and label(status()) == "new"
    assert label(status(State.MOUNTED)) == "mounted"
    assert label(status(State.CREATED, error="x")) == label(status(None, error="x")) == "failed"


def test_an_older_generations_error_is_not_counted_failed():
    """The one rule (daccore/records/buffer_doc.py `failed`): dacd is retrying it."""
    old = status(State.CREATED, error="x", generation=2)
    assert metrics.buffer_state_label(old, 3) == "created"
    assert metrics.buffer_state_label(old, 2) == "failed"


def buffer(name, primary):
    return SimpleNamespace(
        name=name, allocation=SimpleNamespace(primary_host=primary), generation=1
    )


def samples(collector):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def test_only_the_primary_host_counts_a_buffer_and_a_gone_buffer_leaves_the_count(monkeypatch):
    # the process's own count, empty: a dacd run in this process before (a store test's
    # reconciler) may have counted buffers of its own
    monkeypatch.setattr(metrics, "_buffers", {})
    collector = metrics._Buffers("h1")
    metrics.buffer_seen(buffer("m1", "h1"), "h1", status(State.CREATED))
    metrics.buffer_seen(buffer("m2", "h2"), "h1", status(State.CREATED))  # h2 counts this one
    metrics.buffer_seen(buffer("m3", "h1"), "h1", status(State.CREATED, error="x"))
    got = samples(collector)
    assert got[("dac_buffers", (("host", "h1"), ("state", "created")))] == 1
    assert got[("dac_buffers", (("host", "h1"), ("state", "failed")))] == 1
    assert got[("dac_buffers", (("host", "h1"), ("state", "deleted")))] == 0  # every state shown
    assert len(got) == len(metrics.BUFFER_STATES)
    metrics.buffer_gone("m1")
    metrics.buffer_gone("m3")
    assert sum(samples(collector).values()) == 0


def test_a_step_is_timed_and_a_failure_counted_by_category_and_kind():
    count = ("dac_step_duration_seconds_count", {"step": "create", "backend": "unit"})
    admin = ("dac_step_failures_total", {"step": "create", "backend": "unit", "category": "admin"})
    playbook = ("dac_playbook_failures_total", {"step": "create", "backend": "unit"})
    etcd = ("dac_etcd_errors_total", {"error": "StoreUnavailable", "where": "step"})
    start = {k[0]: value(k[0], **k[1]) for k in (count, admin, playbook, etcd)}
    backend = SimpleNamespace(name="unit")
    metrics.step_finished("create", backend, time.monotonic() - 2)
    metrics.step_finished(
        "create", backend, time.monotonic(), PlaybookFailed("create", "mkfs", "h1", 1, "too small")
    )
    metrics.step_finished(
        "create",
        backend,
        time.monotonic(),
        StoreUnavailable(["http://127.0.0.1:1"], "refused", 5.0),
    )
    metrics.step_finished("create", backend, time.monotonic(), UserError("bad"))
    assert value(count[0], **count[1]) - start[count[0]] == 4
    assert value(admin[0], **admin[1]) - start[admin[0]] == 2
    assert value(playbook[0], **playbook[1]) - start[playbook[0]] == 1
    assert value(etcd[0], **etcd[1]) - start[etcd[0]] == 1
    assert value("dac_step_failures_total", step="create", backend="unit", category="user") >= 1
    assert value(
        "dac_step_duration_seconds_bucket", step="create", backend="unit", le="1.0"
    ) < value(count[0], **count[1])  # the 2 s one is above 1 s


def test_a_step_whose_backend_was_not_found_is_labelled_unknown():
    before = value("dac_step_duration_seconds_count", step="mount", backend="unknown")
    metrics.step_finished("mount", None, time.monotonic(), AdminError("no pool"))
    assert value("dac_step_duration_seconds_count", step="mount", backend="unknown") == before + 1


def test_only_etcd_errors_are_counted_as_such():
    before = value("dac_etcd_errors_total", error="InternalError", where="watch")
    metrics.etcd_error("watch", ValueError("not etcd"))
    metrics.etcd_error("watch", UserError("not etcd either"))
    from daccore.errors import Conflict

    metrics.etcd_error("watch", Conflict("a record changed"))
    assert value("dac_etcd_errors_total", error="InternalError", where="watch") == before + 1


def test_stage_counters_follow_the_copiers_cumulative_progress():
    before = (
        value("dac_stage_bytes_total", direction="unit"),
        value("dac_stage_files_total", direction="unit"),
    )
    meter = metrics.StageMeter("unit")
    for done_bytes, files in ((0, 0), (100, 1), (100, 1), (250, 3)):
        meter.progress(
            {"bytes_done": done_bytes, "bytes_total": 250, "files_done": files, "files_total": 3}
        )
    meter.started -= 5  # as if it took 5 s
    meter.done()
    assert value("dac_stage_bytes_total", direction="unit") - before[0] == 250
    assert value("dac_stage_files_total", direction="unit") - before[1] == 3
    assert value("dac_stage_last_bytes_per_second", direction="unit") == pytest.approx(50, 0.05)


class FakeStore:
    def __init__(self, inventory=None, error=None):
        self.inventory, self.error, self.asked = inventory, error, []

    def host_summary_inventory(self, host, pools):
        self.asked.append((host, pools))
        if self.error:
            raise self.error
        return self.inventory


def host_share(alive=True, drained=False, claimed=1):
    pools = {
        "p": PoolInfo("p", 100, "local", "single_host"),
        "other": PoolInfo("other", 100, "local", "single_host"),
    }
    counts = ClaimCounts({"p": claimed}, {("p", "h1"): claimed})
    return Inventory.of_counts(pools, [HostView("h1", alive, drained, {"p": 4})], counts)


@pytest.mark.parametrize(
    "alive,drained,expected",
    [
        (True, False, (4, 3, 1, 1, 0)),
        (True, True, (4, 0, 1, 1, 1)),
        (False, False, (0, 0, 0, 0, 0)),
    ],
)
def test_the_bricks_collector_exports_this_hosts_share_of_its_pools(alive, drained, expected):
    store = FakeStore(host_share(alive, drained))
    got = samples(metrics._Bricks(store, "h1", ["p"]))
    ph = (("host", "h1"), ("pool", "p"))
    assert (
        got[("dac_pool_bricks", ph)],
        got[("dac_pool_bricks_free", ph)],
        got[("dac_pool_bricks_used", ph)],
        got[("dac_host_alive", (("host", "h1"),))],
        got[("dac_host_drained", (("host", "h1"),))],
    ) == expected
    assert not any(dict(labels).get("pool") == "other" for _, labels in got)  # not h1's pool
    assert store.asked == [("h1", ["p"])]  # one read per scrape


def test_a_scrape_with_etcd_down_leaves_the_bricks_out_and_counts_the_error():
    before = value("dac_etcd_errors_total", error="StoreUnavailable", where="scrape")
    store = FakeStore(error=StoreUnavailable(["http://127.0.0.1:1"], "refused", 5.0))
    assert samples(metrics._Bricks(store, "h1", ["p"])) == {}
    assert value("dac_etcd_errors_total", error="StoreUnavailable", where="scrape") == before + 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_on_the_address_until_stopped():
    config = DacConfig.model_validate(
        {
            "pools": {"p": {"granularity": 100}},
            "hosts": {"h1": {"bricks": [{"device": "/dev/x", "capacity": 100, "pool": "p"}]}},
        }
    )
    address = f"127.0.0.1:{free_port()}"
    server = metrics.serve(address, FakeStore(host_share()), "h1", config)
    try:
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
        assert 'dac_pool_bricks_free{host="h1",pool="p"} 3.0' in text
        assert (
            'dac_step_failures_total{backend="local",category="admin",step="create"} ' in text
        )  # every failure series exists from the start
    finally:
        server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{address}/metrics", timeout=5)
    server = metrics.serve(address, FakeStore(host_share()), "h1", config)  # stop unregistered
    server.stop()


def test_a_taken_metrics_port_is_one_line_naming_the_address():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(
            AdminError,
            match=f"^metrics address '{address}': cannot listen: Address already in use$",
        ):
            metrics.serve(address, FakeStore(), "h1", DacConfig(hosts={"h1": {}}))
