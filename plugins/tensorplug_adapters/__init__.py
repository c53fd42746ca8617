"""tensorplug's first-party adapter plugins, one module per framework.

Each module is registered through the ``tensorplug.adapters`` entry-point group, exactly as
a third-party adapter would be. No module imports its framework at import time: a tensor
of a framework can only exist once the framework is in ``sys.modules``.
"""
