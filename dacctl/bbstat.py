"""`dac-bbstat [job id | view]`: what `scontrol show bbstat` and `scontrol show dwstat` print,
and nothing else (daccore/services/bbstat.py says what, for whom).

Slurm runs it as SlurmUser with words a user typed: burst_buffer/datawarp as `GetSysStatus`,
burst_buffer/lua through `slurm_bb_get_status` (when dac's answerer cannot answer), with the
caller Slurm names, if any, in DAC_BBSTAT_CALLER=<uid>:<gid>.
"""

from __future__ import annotations

import os
import sys

from daccore.services.bbstat import answer

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Exit 0 even for a refusal or an error: burst_buffer/datawarp replaces the output of a
    # failed GetSysStatus with "Error running dwstat", and the one line is for the user.
    sys.stdout.write(answer(argv, os.environ.get("DAC_BBSTAT_CALLER", "")))
    return 0
