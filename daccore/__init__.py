"""The shared core of dac, in layers that import only downward (tests/unit/test_import_graph.py
holds the directions):

    errors, units, escape, gcpause   the vocabulary: import nothing of dac
    records/    what is stored and its shapes: models, states, the etcd key layout, the lean
                views the Slurm hooks read instead of the models
    settings/   dac.yaml (the model, its cache for the hooks, the environment) and Slurm's
                burst_buffer.conf policy; the JSON Schemas of both
    rules/      pure decisions over records: the #DW grammar, inventory, the allocator, what a
                record may hold, who acts as root
    etcd/       the etcd client          backends/   how an allocation becomes a filesystem
    store/      every etcd read and write of dac's records, one face (Store)
    services/   what the commands do: jobs (Slurm's hooks), buffers, admin, users' requests,
                estimates, DataWarp's views

The processes sit above it, each in its own package: `dacctl` (the command line and Slurm's
hooks), `dacd` (the storage-server daemon), `dacservice` (two daemons: the answerer of Slurm's
hooks, `dac-answerer`, and the user service, `dac-user-service`), `daclocal` (the all-in-one
local DAC). `daccore` imports none of them. Every package's `__init__` opens with what it owns;
most import nothing (this one, records, settings, rules, etcd, services; dacctl's), so the
hooks' start-up pays nothing for the layering."""

__version__ = "0.1.0"
