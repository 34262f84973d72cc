"""dac's user service, a process of its own (`dac-user-service`, systemd unit dac-users):
users' dacctl commands, answered for the uid munge vouches for.

Ordinary users hold no etcd credential (docs/security.md). Their `dacctl status`, `pools`,
`buffers`, `show`, `estimate`, `create-persistent` and `destroy-persistent` reach etcd through
this service, which runs as SlurmUser with its own credential on `user_service` (host:port).
Their dacctl asks with `daccore.services.user_client.ask`, which also holds the wire protocol:
one munge credential in, one JSON line out. The caller's rights come from the uid munged
verified and the system's group database, never from anything the client says (`caller`).

One user's flood must not slow another's command (issue 45), yet who sent a line is known only
once munged has checked it. So everything before that is shared out by the *peer*: the uid
that owns the connecting socket when it is on this host (the kernel knows it: `Owners`),
else the connecting address. Each peer's queued lines and unmunges are capped, lines are
checked round robin across peers (`Lines`), a peer that has spent its share of the service's
CPU (`Budget`) or filled its queue has its next connections wait unread, and when the reader
is full it is the peer holding the most that loses its oldest connection
(`_Reader._make_room`). After munged, the verified uid's own slots and share take over.

    reader        the one thread holding every connection until it has sent a whole line
    peers         who a peer is, and its share: queued lines, unmunges, CPU time, log lines
    service       the workers: each line checked by munged, answered in its uid's slots
    credentials   what munged verified of a credential, and the rights of its uid
    replies       the service's own replies: an error, busy, a failure, the end of a reply
    server        the process: descriptors, signals, `serve` and `main`
"""

from dacservice.users.credentials import caller, decode, decode_origin
from dacservice.users.reader import MAX_PENDING, MAX_REQUEST, READ_TIMEOUT
from dacservice.users.server import main, serve
from dacservice.users.service import MAX_CLIENTS, PER_UID

__all__ = [
    "main",
    "serve",
    "caller",
    "decode",
    "decode_origin",
    "MAX_REQUEST",
    "READ_TIMEOUT",
    "MAX_CLIENTS",
    "PER_UID",
    "MAX_PENDING",
]
