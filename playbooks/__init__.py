"""dac's Ansible playbooks, one folder per backend (README.md here): shipped in the wheel as the
package `daccore.share.playbooks` (pyproject.toml's package-dir) and found with
`daccore.share.asset("playbooks", ...)`. Not Python code: this file only makes the folder a
package so setuptools maps it."""
