"""dac's answerer, a process of its own (`dac-answerer`, systemd unit dac-answerer): the three
hooks slurmctld runs synchronously, under its job lock (`slurm_bb_job_process`,
`slurm_bb_pools`, `slurm_bb_paths`), answered by a warm process instead of a forked `dacctl
--function`, over a unix socket burst_buffer.lua reaches in-process (lua-socket). Slurm's
real_size, in every release, runs in slurmscriptd: not here. Also `scontrol show bbstat` and
`dwstat` (`bbstat`, issue 45), which any user may loop and slurmctld runs under its
burst-buffer lock, every submission waiting: dac-bbstat's text (daccore/services/bbstat.py)
without a Python started per call.

    wire        the protocol on the socket: a request read, and `ask`, its client in Python
    answers     `Answerer`: the config, the mirror and etcd, the answers, the valid ones kept
    server      the socket: who may connect, its workers, each request's reply; `main`
    publisher   the pools file beside the socket, and when the files beside it follow the mirror
    published   the paths files and the valid files burst_buffer.lua reads instead of asking
    mirror      the keys the hooks read, held in memory, and when that copy is current
"""

from dacservice.answerer.answers import Answerer
from dacservice.answerer.server import main, serve
from dacservice.answerer.wire import MAGIC, SOCKET, ask

__all__ = ["Answerer", "serve", "ask", "SOCKET", "MAGIC", "main"]
