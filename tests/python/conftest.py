"""Makes `import flashkit` work when the tests run without PYTHONPATH=python (e.g. plain `pytest`)."""
import os
import sys

_PYTHON_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python"))
if _PYTHON_DIR not in [os.path.normpath(p) for p in sys.path]:
    sys.path.insert(0, _PYTHON_DIR)
