"""The dacd process: announce the server, stay alive on a lease, reconcile its buffers, stop
cleanly."""

from __future__ import annotations

import functools
import logging
import threading

from daccore.etcd.stream import LeaseKeeper
from daccore.rules.trust import shown
from daccore.settings.config import DacConfig
from daccore.store import Store
from dacd import metrics, runner
from dacd.reconciler import Reconciler
from dacd.registration import check_devices, exposure, host_record, host_settings, pool_records
from dacd.staging.injob import InJobStager
from dacd.warm_ansible import WarmAnsible

log = logging.getLogger(__name__)

__all__ = ["Daemon"]


class Daemon:
    """One storage server's daemon. `start()` registers and returns; `stop()` leaves at once."""

    def __init__(self, config: DacConfig, host: str, config_source: str):
        self.config, self.host = config, host
        self.settings = host_settings(config, host, config_source)
        # The http transport, whatever the config says: dacd forks (ansible-runner, the copier),
        # and gRPC's threads make fork unsafe. Seen: "Other threads are currently calling into
        # gRPC, skipping fork() handlers", then ansible-runner failed before its first task.
        self.store = Store.from_settings(config.etcd, transport="http", role="dacd")
        self._lease: LeaseKeeper | None = None
        self.reconciler: Reconciler | None = None
        self.injob: InJobStager | None = None
        self.metrics: metrics.MetricsServer | None = None
        self.warm: WarmAnsible | None = None
        self.stopping = threading.Event()

    def start(self) -> None:
        check_devices(self.host, self.settings, self.config)
        if self.config.metrics_address:  # before registering: a taken port stops dacd first
            self.metrics = metrics.serve(
                self.config.metrics_address, self.store, self.host, self.config
            )
        for pool in pool_records(self.config):
            self.store.ensure_pool(pool)
        warnings = exposure(self.settings)
        for line in warnings:
            log.warning("open to users: %s", line)
        record = self.store.register_host(host_record(self.host, self.settings, warnings))
        unreadable: list[str] = []
        if rolled_back := self.store.recover_intents(unreadable=unreadable):
            log.info("rolled back the allocations of %s, cut short", ", ".join(rolled_back))
        for key in unreadable:
            log.error(
                "skipping %s: not a buffer spec dac wrote, so no claim of it can be "
                "released; an admin must delete it",
                shown(key, 200),
            )
        # fenced: after a lapse (dacd frozen, or cut off from etcd) no step runs and no status
        # is written until a new lease is bound; then every buffer is looked at again
        self._lease = self.store.keep_alive(self.host, self.config.lease_ttl, on_bound=self._relist)
        log.info(
            "host %s registered: %d bricks, drained=%s, lease ttl %ss",
            self.host,
            len(record.bricks),
            record.drained,
            self.config.lease_ttl,
        )
        if swept := runner.sweep_stale_runs(self.host):
            log.info("removed %d playbook run directories a killed dacd left", swept)
        run_step = None
        if self.config.warm_ansible:
            self.warm = WarmAnsible()
            self.warm.ensure()  # listening before the first step asks
            run_step = functools.partial(runner.run_step, warm=self.warm)
        self.injob = InJobStager(self.store, self.config, self.host)
        self.reconciler = Reconciler(self.store, self.config, self.host, run_step, injob=self.injob)
        self.reconciler.start()
        self.injob.start()

    def _relist(self) -> None:
        if self.reconciler is not None:
            self.reconciler.relist()

    def wait(self) -> None:
        # In slices: Python runs a signal's handler in the main thread only, and a SIGTERM that
        # another thread took (after SIGSTOP, whichever thread resumes first takes the pending
        # one) does not wake a main thread blocked in an unbounded wait. Seen: a frozen dacd
        # given SIGTERM then SIGCONT still running 30 s later.
        while not self.stopping.wait(1.0):
            pass

    def stop(self) -> None:
        """Revoke the lease so the host leaves the pools now, not after the TTL."""
        self.stopping.set()
        if self.injob is not None:
            self.injob.stop()
            self.injob = None
        if self.reconciler is not None:
            self.reconciler.stop()
            self.reconciler = None
        if self._lease is not None:
            self._lease.stop()
            self._lease = None
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        if self.warm is not None:
            self.warm.stop()
            self.warm = None
        log.info("host %s stopped", self.host)
