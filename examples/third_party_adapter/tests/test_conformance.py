"""The mytensor adapter, certified by tensorplug's conformance kit. No conftest: the kit
makes MyTensors through the adapter's own conversion and reads what the adapter declares."""

from tensorplug.testing.conformance import *  # noqa: F401,F403
