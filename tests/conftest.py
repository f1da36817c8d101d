"""pytest setup: tests/ on sys.path (mpi_util, reference), and a clear message when the
source tree shadows the installed package."""

import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

try:
    import rdmacoll._core  # noqa: F401
except ImportError as e:
    import rdmacoll

    raise ImportError(
        f"cannot import the compiled core ({e}); rdmacoll was found at {rdmacoll.__file__}. "
        "Install the package (pip install .) and run the `pytest` script (pytest tests), not "
        "`python -m pytest` from the repository root, whose source tree has no compiled _core."
    ) from e
