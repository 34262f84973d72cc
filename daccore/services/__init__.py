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

The top of daccore: imports any layer below, never a process package."""
