"""dac's etcd client, one module per concern, importing in one direction only:

    types            records, errors, the transport interface and what the store asks of a
                     client (`EtcdApi`; standard library only)
    client           EtcdClient: one API over the transports, retry and endpoint failover
    grpc_transport   etcd's gRPC API (daemons, admin commands)
    http_transport   etcd's JSON gateway over the standard library (the hooks inside slurmctld)
    stream           watches and lease keepalives, for the long-lived callers
    auth             the etcd user dac acts as: its token, cached and renewed

The transports and `stream` import `types`; `client` imports them only when first used, so the
hooks never load grpc. Nothing here imports `client` at run time but `daccore.store`.
"""
