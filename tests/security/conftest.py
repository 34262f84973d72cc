"""The attacks' local DACs (`dac`, `one_brick`, `open_dir`), shared by test_staging_*.py and
the teardown tests; a module that defines its own fixture of the same name keeps its own."""

from security.staging_dac import dac, one_brick, open_dir  # noqa: F401  (fixtures)
