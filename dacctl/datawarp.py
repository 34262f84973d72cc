"""`dacctl --function <f> …`: Cray's dw_wlm_cli protocol, as Slurm's burst_buffer/datawarp forks
it, and as slurm-plugin/burst_buffer.lua forks it for burst_buffer/lua when dac's answerer
cannot answer (one contract for both).

dacctl.main parses argv once (dacctl/commands.py, whose Slurm rows are
daccore/services/command_table.py's) and hands the parse, or the Usage that refused it, here:
the answer is the core's (daccore/services/slurm_answer.py, which checks the caller first),
the very code the answerer (dacservice/answerer/) runs for the hooks inside slurmctld. This
process writes it: exit 0 and the function's output on stdout, or exit 1 and one line on
stdout, which Slurm shows the user; a traceback on stderr only under --debug.
"""

from __future__ import annotations

import sys

from daccore.services.slurm_answer import answer

TYPE_CHECKING = False  # typing's own, without importing typing on the hooks' path; mypy: True
if TYPE_CHECKING:
    import argparse

    from daccore.services.command_table import Usage

__all__ = ["run"]


def run(parsed: argparse.Namespace | Usage) -> int:
    """`dacctl --function …` forked: dacctl.main's parse of its argv, the arguments of a Slurm
    function or the Usage that refused them, answered by Slurm's protocol."""
    rc, out, err = answer(parsed)
    sys.stderr.write(err)
    sys.stdout.write(out)
    return rc
