"""The shared core of dac: record models, units, errors, config, the etcd key layout and store,
and the allocator. It imports nothing from `dacctl` or `dacd`."""

__version__ = "0.1.0"
