"""The user service's process (`dac-user-service`): its descriptors, its signals, `serve` and
`main`.
"""

from __future__ import annotations

import logging
import resource
from typing import TYPE_CHECKING

from daccore.errors import AdminError, DacError
from daccore.services.user_client import split_address
from dacservice.users.reader import MAX_PENDING, RESERVE
from dacservice.users.service import _Service

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from daccore.settings.config import DacConfig

__all__ = ["serve", "main"]

log = logging.getLogger(__name__)


def _more_descriptors() -> None:
    """Every descriptor the hard limit allows, and a hard limit raised to what the reader may
    hold where the service may raise it (CAP_SYS_RESOURCE: the local DAC's root): each
    connection held is one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_PENDING + RESERVE
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return
        except (ValueError, OSError):
            pass
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(config: DacConfig, ready: Callable[[], object] | None = None) -> None:
    """Answer requests on `config.user_service` until SIGTERM/SIGINT; `ready()` is called
    once the port is listening."""
    import signal

    from daccore.store import Store

    if not config.user_service:
        raise AdminError(
            "user_service is not set in the config: set it to host:port (docs/security.md)"
        )
    store = Store.from_settings(config.etcd, role="slurm")  # Slurm's rights, no more
    from daccore.records import models  # noqa: F401 - loaded now, not by the first request

    _more_descriptors()
    try:
        server = _Service(split_address(config.user_service), config, store)
    except OSError as e:
        raise AdminError(
            f"user service cannot listen on {config.user_service}: {e.strerror}"
        ) from None

    def stop(signum: int, frame: FrameType | None) -> None:
        server.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "dac user service on %s (munge socket %s; at most %d connections held)",
        config.user_service,
        config.munge_socket or "munge's default",
        server.capacity,
    )
    if ready:
        ready()
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """`dac-user-service`: dac's user service, run as SlurmUser under systemd
    (daccore/share/packaging/dac-users.service) with the config DAC_CONFIG names; it answers
    users' status, pools, buffers, show, create-persistent and destroy-persistent for the uid
    their munge credential proves, on the config's user_service (host:port). A DacError is one
    line on stderr and the exit code of its kind."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="dac-user-service", description=main.__doc__)
    p.add_argument("--debug", action="store_true", help="a traceback with an error")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s dac-user-service[%(process)d] %(message)s"
    )
    from daccore.escape import printable
    from daccore.settings.config import load_config

    try:
        serve(load_config())
    except DacError as e:
        if args.debug:
            raise
        print(printable(f"dac-user-service: {e.kind.value} error: {e}"), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # before serve() took SIGINT over
        print("dac-user-service: interrupted", file=sys.stderr)
        return 130
    return 0
