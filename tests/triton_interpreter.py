"""Import first in a test file that runs the Triton path on CPU tensors: it chooses Triton's interpreter
for the process (TRITON_INTERPRET=1) and skips the importing file, saying why, where that is too late.

triton.language decorates its own helpers (tl.zeros, ...) with @triton.jit when it is first imported, so
the variable must be set before that in the process; where an earlier test file imported it (torch._dynamo
does), interpreted kernels calling those helpers fail. Under `pytest -n 2` every worker collects
tests/backends/test_triton.py first, which sets the variable, so these files run there.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton path of torch.compile needs torch")
pytest.importorskip("triton", reason="the Triton path needs triton (pip install 'tilegraph[triton]')")
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

if not isinstance(tl.zeros, InterpretedFunction):
    pytest.skip("triton.language was imported in this process before TRITON_INTERPRET=1 was set (by an earlier "
                "test file importing torch._dynamo): run this file on its own, or after tests/backends/"
                "test_triton.py, which sets it first (as every `pytest -n 2` worker does)", allow_module_level=True)
