"""Slurm's side of dac (README.md here): burst_buffer.lua, its environment file and the sample
burst_buffer.conf for each plugin. Shipped in the wheel as the package `daccore.share.slurm`
(pyproject.toml's package-dir) and found with `daccore.share.asset("slurm", ...)`. Not Python
code: this file only makes the folder a package so setuptools maps it."""
