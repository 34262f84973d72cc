"""dacd's Prometheus metrics: the only module that imports prometheus_client.

Names, labels, meaning and sample alert rules: docs/operations.md. `serve` starts
prometheus_client's HTTP server (a daemon thread) on `metrics_address`; never its multiprocess
mode: dacd's children (ansible-runner, the copier) exec other programs and record nothing.

Counters and histograms live in prometheus_client's default registry, one set per process, as
Prometheus means them (one dacd per process, and its process_* metrics come with them): the
reconciler and staging record through the small functions below instead of passing a metrics
object down every call. Two collectors answer at scrape time: bricks, from one etcd read of this
host's share of its pools (`Store.host_summary_inventory`), and buffers by state, from what this
dacd's reconciler last saw.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from daccore.errors import (
    AdminError,
    DacError,
    InternalError,
    Kind,
    PlaybookFailed,
    StoreUnavailable,
)
from daccore.records.lifecycle import STEP_FOR
from daccore.records.models import State
from daccore.rules.inventory import summarize

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from daccore.rules.inventory import Inventory
    from daccore.settings.config import DacConfig

log = logging.getLogger(__name__)

__all__ = [
    "serve",
    "MetricsServer",
    "split_address",
    "buffer_seen",
    "buffer_gone",
    "step_finished",
    "etcd_error",
    "StageMeter",
    "buffer_state_label",
]

#: prometheus_client (0.26) leaves this one function unannotated: typed here for mypy --strict
_disable_created_metrics: Callable[[], None] = disable_created_metrics
_disable_created_metrics()  # no *_created series: they would double what a scrape carries

_STEP_SECONDS = Histogram(
    "dac_step_duration_seconds",
    "Wall time of a lifecycle step on this dacd, failed or not",
    ["step", "backend"],
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
_STEP_FAILURES = Counter(
    "dac_step_failures",
    "Lifecycle steps that failed, by who must act (category)",
    ["step", "backend", "category"],
)
_PLAYBOOK_FAILURES = Counter(
    "dac_playbook_failures",
    "Lifecycle steps whose playbook failed (PlaybookFailed)",
    ["step", "backend"],
)
_STAGE_BYTES = Counter("dac_stage_bytes", "Bytes copied by stage_in / stage_out", ["direction"])
_STAGE_FILES = Counter(
    "dac_stage_files", "Files and links copied by stage_in / stage_out", ["direction"]
)
_STAGE_THROUGHPUT = Gauge(
    "dac_stage_last_bytes_per_second",
    "Bytes per second of the last stage that completed (its bytes over its wall time)",
    ["direction"],
)
_ETCD_ERRORS = Counter(
    "dac_etcd_errors",
    "etcd unreachable (StoreUnavailable) or a bad answer or record "
    "(InternalError), seen by the buffer watch, a reconcile pass, a step or a scrape",
    ["error", "where"],
)

#: buffer name -> state label, for the buffers whose primary host is this dacd's
_buffers: dict[str, str] = {}
_buffers_lock = threading.Lock()
BUFFER_STATES = ("new", *(s.value for s in State), "failed")

#: host:port, or [IPv6]:port; the config's metrics_address has the same pattern
_ADDRESS = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*))"
    r":(?P<port>[0-9]{1,5})$"
)


# -- what the reconciler and staging call -----------------------------------------------------


class Reached(Protocol):
    """What a buffer's state label is read from: a host's Status (or None, before any)."""

    @property
    def state(self) -> State | None: ...

    @property
    def error(self) -> object: ...

    @property
    def generation(self) -> int: ...


class _Primary(Protocol):
    @property
    def primary_host(self) -> str: ...


class Seen(Protocol):
    """What buffer_seen reads of a Buffer."""

    @property
    def name(self) -> str: ...

    @property
    def allocation(self) -> _Primary: ...

    @property
    def generation(self) -> int: ...


class Named(Protocol):
    """A backend, as step_finished labels it."""

    @property
    def name(self) -> str: ...


class HostInventory(Protocol):
    """What the bricks collector reads of the Store."""

    def host_summary_inventory(self, host: str, pools: list[str]) -> Inventory: ...


def buffer_state_label(status: Reached | None, generation: int) -> str:
    """'failed' when the host failed at the spec's `generation` (buffer_doc.failed, the rule
    of every view: an older generation's error is being retried), else the state reached,
    'new' before any."""
    from daccore.records.buffer_doc import failed

    if status is not None and failed(
        {"error": status.error, "generation": status.generation}, generation
    ):
        return "failed"
    return "new" if status is None or status.state is None else status.state.value


def buffer_seen(buf: Seen, host: str, status: Reached | None) -> None:
    """Note the state `host` reached for `buf`. Only the buffer's primary host counts it, so
    summing dac_buffers over every dacd counts each buffer once."""
    if host == buf.allocation.primary_host:
        with _buffers_lock:
            _buffers[buf.name] = buffer_state_label(status, buf.generation)


def buffer_gone(name: str) -> None:
    with _buffers_lock:
        _buffers.pop(name, None)


def step_finished(
    step: str, backend: Named | None, started: float, error: DacError | None = None
) -> None:
    """Observe a step that began at `started` (time.monotonic()); count it if it failed."""
    name = getattr(backend, "name", "") or "unknown"  # None when the backend was not found
    _STEP_SECONDS.labels(step, name).observe(time.monotonic() - started)
    if error is not None:
        _STEP_FAILURES.labels(step, name, error.kind.value).inc()
        if isinstance(error, PlaybookFailed):
            _PLAYBOOK_FAILURES.labels(step, name).inc()
        if isinstance(error, StoreUnavailable):
            etcd_error("step", error)


def etcd_error(where: str, error: BaseException) -> None:
    """Count `error` if it is StoreUnavailable or InternalError; ignore any other."""
    if isinstance(error, StoreUnavailable):
        _ETCD_ERRORS.labels("StoreUnavailable", where).inc()
    elif isinstance(error, InternalError):
        _ETCD_ERRORS.labels("InternalError", where).inc()


class StageMeter:
    """One copier's cumulative progress turned into the stage counters as it comes (about once
    a second), so rate() follows a long copy while it runs; `done` sets the throughput gauge."""

    def __init__(self, direction: str) -> None:
        self.direction, self.started = direction, time.monotonic()
        self.bytes = self.files = 0

    def progress(self, message: dict[str, Any]) -> None:
        b, f = message.get("bytes_done", 0), message.get("files_done", 0)
        if b > self.bytes:
            _STAGE_BYTES.labels(self.direction).inc(b - self.bytes)
            self.bytes = b
        if f > self.files:
            _STAGE_FILES.labels(self.direction).inc(f - self.files)
            self.files = f

    def done(self) -> None:
        seconds = time.monotonic() - self.started
        if seconds > 0:
            _STAGE_THROUGHPUT.labels(self.direction).set(self.bytes / seconds)


# -- scrape-time collectors -------------------------------------------------------------------


class _Bricks(Collector):
    """This host's share of each pool it has bricks in, from one etcd read per scrape; summing
    over hosts gives `dacctl pools` (a host whose lease is gone counts 0, as there)."""

    def __init__(self, store: HostInventory, host: str, pools: list[str]) -> None:
        self.store, self.host, self.pools = store, host, pools

    def describe(self) -> list[GaugeMetricFamily]:  # register() checks names without an etcd read
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        labels = ["pool", "host"]
        return (
            GaugeMetricFamily(
                "dac_pool_bricks",
                "Bricks of this host in the pool's total (0 while its lease is gone)",
                labels=labels,
            ),
            GaugeMetricFamily(
                "dac_pool_bricks_free",
                "Unclaimed bricks of this host that placement may use (0 when drained or down)",
                labels=labels,
            ),
            GaugeMetricFamily(
                "dac_pool_bricks_used",
                "Claimed bricks of this host (0 while its lease is gone)",
                labels=labels,
            ),
            GaugeMetricFamily(
                "dac_host_alive",
                "1 while this host's alive key exists in etcd (its dacd's lease)",
                labels=["host"],
            ),
            GaugeMetricFamily(
                "dac_host_drained", "1 when an admin drained this host", labels=["host"]
            ),
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            inv = self.store.host_summary_inventory(self.host, self.pools)
        except DacError as e:
            etcd_error("scrape", e)
            log.warning("metrics: cannot read host %s's bricks: %s", self.host, e)
            return
        total, free, used, alive, drained = self._families()
        (view,) = inv.views() or (None,)
        if view is not None:
            for s in summarize(inv):
                if s.name in view.pools:
                    for family, value in ((total, s.total), (free, s.free), (used, s.used)):
                        family.add_metric([s.name, self.host], value)
            alive.add_metric([self.host], int(view.alive))
            drained.add_metric([self.host], int(view.drained))
        yield from (total, free, used, alive, drained)


class _Buffers(Collector):
    def __init__(self, host: str) -> None:
        self.host = host

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dac_buffers",
            "Buffers whose primary host is this one, by the state it reached "
            "('new' before the first, 'failed' after a failed step)",
            labels=["host", "state"],
        )
        with _buffers_lock:
            states = list(_buffers.values())
        for state in BUFFER_STATES:
            family.add_metric([self.host, state], states.count(state))
        yield family


# -- the HTTP server --------------------------------------------------------------------------


def split_address(address: str) -> tuple[str, int]:
    """'127.0.0.1:9560' -> ('127.0.0.1', 9560); '[::1]:9560' -> ('::1', 9560)."""
    m = _ADDRESS.match(address)
    port = int(m.group("port")) if m else 0
    if not 0 < port < 65536:
        raise AdminError(
            f"metrics address '{address}': must be host:port with a port from 1 "
            "to 65535, e.g. 127.0.0.1:9560"
        )
    assert m is not None  # a non-match raised above
    return m.group("v6") or m.group("host"), port


class MetricsServer:
    """The /metrics endpoint of one dacd; `stop` closes it and unregisters its collectors."""

    def __init__(
        self, address: str, httpd: WSGIServer, thread: threading.Thread, collectors: list[Collector]
    ) -> None:
        self.address, self._httpd, self._thread, self._collectors = (
            address,
            httpd,
            thread,
            collectors,
        )

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
        for c in self._collectors:
            REGISTRY.unregister(c)


def serve(address: str, store: HostInventory, host: str, config: DacConfig) -> MetricsServer:
    """Serve /metrics on `address` for `host`'s dacd; AdminError naming the address when it
    is malformed or taken."""
    addr, port = split_address(address)
    pools = sorted({b.pool for b in config.hosts[host].bricks})
    _zero_failures({p.backend.value for p in config.pools.values()})
    try:
        httpd, thread = start_http_server(port, addr)
    except OSError as e:
        raise AdminError(f"metrics address '{address}': cannot listen: {e.strerror or e}") from e
    collectors: list[Collector] = [_Bricks(store, host, pools), _Buffers(host)]
    for c in collectors:
        REGISTRY.register(c)
    log.info("metrics on http://%s/metrics", address)
    return MetricsServer(address, httpd, thread, collectors)


def _zero_failures(backends: set[str]) -> None:
    """Every failure series exists from the start at 0, so increase() sees the first one."""
    for backend in sorted(backends):
        for step in STEP_FOR.values():
            _PLAYBOOK_FAILURES.labels(step, backend)
            for kind in Kind:
                _STEP_FAILURES.labels(step, backend, kind.value)
