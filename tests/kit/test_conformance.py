"""The conformance kit (tensorplug.testing.conformance) against every installed adapter.

Every check of a framework's behaviour lives in the kit, so that third-party adapters get
the same checks; this module runs it for the project's own adapters (numpy, torch, jax,
paddle, cupy, the dlpack fallback, tensorplug.Tensor, and any installed third party).
"""

from tensorplug.testing.conformance import *  # noqa: F401,F403
