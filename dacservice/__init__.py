"""dac's two services, each a process of its own, and each a package:

    answerer    `dac-answerer` (systemd unit dac-answerer), on the Slurm controller: Slurm's
                synchronous hooks and bbstat answered from an in-memory copy of etcd, over a
                unix socket only root and SlurmUser reach (docs/slurm.md, "The answerer")
    users       `dac-user-service` (systemd unit dac-users): users' dacctl commands,
                authenticated with munge, answered from the controller so users hold no etcd
                credential (docs/security.md); its client, `ask`, is
                daccore.services.user_client

Neither imports the other."""
