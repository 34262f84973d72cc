"""Services: what the commands do, over the store.

    jobs            Slurm's hooks: a job's buffers from validation to teardown
    buffers         creating a buffer (placement, then the claim)
    admin           draining hosts; persistent buffers made and destroyed by hand
    admin_views     what `dacctl hosts`, `buffers` and `show` print
    user_requests   users' dacctl commands, scoped to the caller's own buffers
    user_client     `ask`: a user's dacctl asking dac's user service (dacservice), and the
                    wire both share
    estimate        capacity advice for a job script
    dws             dac's buffers as DataWarp's sessions, instances and activations
    command_table   the row type of dacctl's command table and its parser, and Slurm's rows
                    (dw_wlm_cli's functions, with how each runs)
    slurm_answer    Slurm's functions answered (dacctl --function and the answerer alike):
                    the caller and every argument checked, then the function's handler
    slurm_functions a checked call (SlurmCall), and the answers: pools, job_process, paths,
                    show_*, real_size
    slurm_steps     setup, create_persistent, data_in/out, pre_run, post_run, teardown
    slurm_args      who may call Slurm's functions, and the checks on their arguments
    slurmjob        what dac asks Slurm about a job (its nodes, its job array)
    bbstat          what `scontrol show bbstat` and `dwstat` print

The top of daccore: imports any layer below, never a process package."""
