"""The patterns and bounds every record obeys: what `daccore.records.models` validates with and
`daccore.rules.trust` checks by, in one place that imports nothing (the Slurm hooks use the patterns
on their hot path, and the models and the checks both need them)."""

__all__ = [
    "NAME",
    "BUFFER_NAME",
    "JOB_KEY",
    "MAX_BYTES",
    "MAX_PATH",
    "MAX_STAGE_LINES",
    "MAX_STAGE_TEXT",
    "MAX_CREATE_LINES",
    "MAX_DESTROY_LINES",
    "MAX_SCRIPT_HEAD",
    "MAX_SCRIPT_HEAD_LINES",
    "MAX_JOBS",
    "MAX_NODES",
    "MAX_INJOB_STAGES",
    "MAX_INJOB_HOSTS",
]

#: hosts, bricks, pools, compute nodes: safe inside an etcd key, a path and an argv.
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
#: a job's buffer is named after its job id; a persistent buffer as directives.PERSISTENT_NAME.
BUFFER_NAME = r"^(?:[0-9]{1,10}|[A-Za-z][A-Za-z0-9_.-]{0,63})$"
#: attachment keys are Slurm job ids (uint32).
JOB_KEY = r"^[0-9]{1,10}$"
#: 1 EiB: more than any pool; keeps sums of sizes far from overflowing anything downstream.
MAX_BYTES = 1 << 60
#: Linux's PATH_MAX, for a stage line's source and destination.
MAX_PATH = 4096
#: per direction; a job script with more is better served by one `type=list` line.
MAX_STAGE_LINES = 1000
#: UTF-8 bytes of every stage line's source and destination together: a buffer's record is one
#: etcd value, and etcd refuses a request over 1.5 MiB (--max-request-bytes), which 1,000 lines
#: of two 4,096-byte paths would be twice over.
MAX_STAGE_TEXT = 512 << 10
#: create_persistent lines of one job, and destroy_persistent lines: Slurm sets no bound, and
#: its datawarp plugin starts every one of a job's at once, each a dacctl process of its own
#: beside slurmctld (about 45 MB, 0.1 s of CPU to start) that waits for its buffer's filesystem
MAX_CREATE_LINES = 8
MAX_DESTROY_LINES = 8
#: bytes and lines of a job script's leading comment block, the only part of it directives are
#: read from, by Slurm and by dac (the rest is never read): job_process looks at each line in
#: Python inside slurmctld, under its job lock. A script at every other bound at once comes
#: to 0.67 MiB and 3,019 lines of it; Slurm's own bound on a whole script is 4 MB by default.
MAX_SCRIPT_HEAD = 1 << 20
MAX_SCRIPT_HEAD_LINES = 10_000
#: jobs attaching one persistent buffer at once, and compute nodes of one job.
MAX_JOBS = 10_000
MAX_NODES = 100_000
#: in-job stage ids of one job (dacd drops finished records past the newest few: a job may
#: drain a checkpoint every few seconds for days)
MAX_INJOB_STAGES = 2**31 - 1
#: storage servers one job's in-job stages may run on: its buffer's and its persistent ones'
MAX_INJOB_HOSTS = 32  # an index read with its stages is one transaction: 1 + 2 x 32 ops
