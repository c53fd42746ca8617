"""Tensors made inside a kernel library outlive the Module that loaded it."""

import subprocess
import sys
import textwrap


def test_tensor_from_library_outlives_module(kernels):
    code = textwrap.dedent(f"""
        import gc
        import numpy as np
        import tensorplug
        m = tensorplug.load_module({kernels.path!r})
        t = m.nd_alloc(1000)                # FromNDAlloc: its deleter lives in the library
        with tensorplug.output_framework("numpy"):
            a = m.nd_alloc(10)              # the same, held by a numpy array
        del m
        gc.collect()
        print(float(np.from_dlpack(t).sum()), float(a.sum()))
        del t, a
        gc.collect()
        print("freed")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(float(sum(range(1000)))), "45.0", "freed"]
