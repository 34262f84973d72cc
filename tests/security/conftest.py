"""The staging attacks' local DAC (`dac`, `open_dir`), shared by test_staging_*.py; a module
that defines its own fixture of the same name keeps its own."""

from security.staging_dac import dac, open_dir  # noqa: F401  (fixtures)
