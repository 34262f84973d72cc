"""The reconciler's parts (dacd/reconciler.py composes them; its docstring says what they do
together). Each holds its own state, and is handed the others' it needs explicitly:

    intake.py       `Intake`: which buffers to look at and when (the listing, the watches of
                    the claims and the work keys, the resync, the worker pool)
    claims.py       `Claims`: the buffers this host's claims give it, and what it acted on
    buffer_pass.py  `BufferPass`: what one buffer's reconcile does on this host
    step.py         `StepRunner`: one step run (a playbook or a stage) and its outcome recorded
    step_status.py  `StepStatus`: the statuses a step writes while it runs and when it ends
    stages.py       `StagePool`: the stage pool, and the stage each buffer has under way there
    refusals.py     `Refusals`: the records dacd will not act on, each logged once

A split stage's shares on this host are `SplitShares` (dacd/staging/shares.py).

Nothing is imported here: dacd imports what it uses from each module.
"""
