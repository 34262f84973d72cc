"""Settings: what a site configures.

    config      dac.yaml's model (DacConfig) and its loading
    cache       the validated config cached for the hooks, read without pydantic
    env         the environment variables that point at the config
    bb_policy   Slurm's burst_buffer.conf rules, applied on dac's own paths too
    schema      the JSON Schemas of the records and of dac.yaml (python -m daccore.settings.schema)

Imports records and the foundation."""
