"""`python -m dacservice.users`: dac-user-service, as root's daemons start (daclocal)."""

from dacservice.users.server import main

if __name__ == "__main__":  # not when imported (tests/unit/test_import_graph.py imports all)
    raise SystemExit(main())
