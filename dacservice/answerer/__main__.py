"""`python -m dacservice.answerer`: dac-answerer, as its entry point runs it."""

from dacservice.answerer.server import main

if __name__ == "__main__":  # not when imported (tests/unit/test_import_graph.py imports all)
    raise SystemExit(main())
