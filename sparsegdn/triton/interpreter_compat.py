"""Triton 3.6's interpreter (TRITON_INTERPRET=1) with NumPy >= 2.4: loop bounds loaded from memory.

The interpreter holds a scalar as a one-element, one-dimensional array and makes it a Python int with
int(array), which NumPy 2.4 refuses for arrays of one dimension or more. So a kernel loop such as
`for i in range(begin, end)` over bounds read with tl.load fails in the interpreter while it compiles
and runs on a GPU. install() makes the interpreter take the array's one element instead; compiled
kernels are not touched. Imported by sparsegdn.triton when the interpreter is asked for.
"""
import numpy as np


def _scalar_index(tensor) -> int:
    data = tensor.handle.data
    if data.size != 1:
        raise TypeError(f"only a scalar can be used as an index, not a block of shape {data.shape}")
    return int(np.asarray(data).reshape(-1)[0])


def install() -> None:
    """Wrap the interpreter's patch of tl.tensor so that __index__ reads a one-element array's element."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "sparsegdn_compat", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _scalar_index)

    patch_lang_tensor.sparsegdn_compat = True
    interpreter._patch_lang_tensor = patch_lang_tensor
