"""Call-overhead benchmark, tensorplug side by side with apache-tvm-ffi.

    python benchmarks/bench_overhead.py [--repeat N] [--calls N] [--frameworks numpy,torch] [--json PATH]

The same as `tensorplug bench` (the implementation is tensorplug._bench, so that the
command works from an installed package); see benchmarks/README.md.
"""

import sys

from tensorplug._bench import main

if __name__ == "__main__":
    sys.exit(main())
