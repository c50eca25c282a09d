"""conftest.py: makes the tests import this checkout's convt3d when it is not installed."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
try:
    import convt3d  # noqa: F401  (an installed package wins)
except ImportError:
    sys.path.insert(0, str(TESTS.parent))
