"""The mytensor adapter, certified by tensorplug's conformance kit (see ../conftest.py)."""

from tensorplug.testing.conformance import *  # noqa: F401,F403
