# burst_buffer.conf for BurstBufferType=burst_buffer/lua, next to slurm.conf and
# burst_buffer.lua (this directory's). See docs/slurm.md.

# Slurm hands a job's burst-buffer lines to the hooks only if they start with #<Directive>.
# DW lets DataWarp scripts (#DW jobdw ...) run unchanged; set lua_directive: DW in dac.yaml too.
# Note: burst_buffer/lua itself parses capacity= and then requires pool= on the same line.
Directive=DW

# Below Slurm's limits, above dac's own waits (dacctl returns before these fire).
StageInTimeout=3600
StageOutTimeout=3600
OtherTimeout=600

# TeardownFailure: a job whose setup or stage-in fails is held and its buffer torn down at
# once (hurry), so the held job keeps no pool capacity; `scontrol release` runs setup and
# stage-in again. Without it Slurm keeps the job's capacity allocated until it is cancelled.
# A failed stage-out's buffer is kept either way: dac's teardown stages out first and fails the
# same way (docs/slurm.md, "A job held by a failed setup or stage-in").
Flags=TeardownFailure
#AllowUsers=alice,bob
