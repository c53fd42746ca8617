"""tensorplug's first-party adapter plugins, one package per framework.

Each package (``tensorplug_adapters.torch``, ``.jax``, ...) is registered through the
``tensorplug.adapters`` entry-point group, exactly as a third-party adapter would be; its
``__init__.py`` holds the hooks, the modules beside it one concept each (docs/design.md,
"The adapter packages"). No module imports its framework at import time: a tensor of a
framework can only exist once the framework is in ``sys.modules``.
"""
