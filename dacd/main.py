"""`dacd --config FILE [--host NAME] [--metrics-address HOST:PORT]`: the entry point;
configures logging and signals."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys

from daccore.errors import DacError
from daccore.settings.config import DEFAULT_PATH, config_path, load_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dacd", description="dac storage-server daemon")
    p.add_argument("--config", help=f"config file (default: $DAC_CONFIG or {DEFAULT_PATH})")
    p.add_argument(
        "--host",
        default=socket.gethostname(),
        help="this server's name in the config (default: the hostname)",
    )
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here; wins over metrics_address in the "
        "config ('' turns it off)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s dacd[%(process)d] %(name)s: %(message)s",
    )
    from dacd.daemon import Daemon  # after logging is set up

    try:
        config = load_config(args.config)
        if args.metrics_address is not None:
            config = config.model_copy(update={"metrics_address": args.metrics_address})
        daemon = Daemon(config, args.host, config_path(args.config))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: daemon.stopping.set())
        daemon.start()
        daemon.wait()
        daemon.stop()
        return 0
    except DacError as e:
        if args.debug:
            logging.exception("dacd failed")
        print(f"dacd: {e.kind.value} error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
