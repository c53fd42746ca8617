"""The conformance kit's Frameworks of tensorplug's first-party adapters, one module per
adapter.

Each module is a pytest plugin, registered through a ``pytest11`` entry point, that
answers the kit's ``pytest_tensorplug_framework(name)`` hook for its adapter: exactly how a
third party plugs in the Framework of its own adapter. No module imports its framework
until a tensor of it is asked for.
"""
