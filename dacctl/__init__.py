"""dacctl: the command line for Slurm, users and admins. A thin client of `daccore`."""
