"""dacd: the daemon on each storage server."""

__version__ = "0.1.0"
