"""Records: what dac stores in etcd and the shapes it takes.

    bounds        the patterns and limits every record obeys (imports nothing)
    states        a buffer's and a host's states
    models        the pydantic records (Pool, Host, Buffer, Status, ...), validated on read
    keys          the etcd key layout: the only place that spells a key
    layout        where a compute node sees a buffer (mount paths)
    lifecycle     a host's next step for a buffer, from spec and state
    buffer_doc, status_view   the lean views of a buffer and a status the Slurm hooks read from
                  JSON without pydantic; tests tie them to the models. buffer_doc also
                  holds the one rule of whether a buffer failed, and its one-word state

Imports only the foundation (`daccore.errors`, `units`, `escape`)."""
