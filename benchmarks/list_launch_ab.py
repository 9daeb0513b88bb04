"""Host issue time of the overlapped list path with its kernels launched through launch.Launcher or through Triton's
own launch path (one process, 32K, claims on): python benchmarks/list_launch_ab.py"""
import sys
sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")

import kernel_bench  # noqa: E402
import overlap_check  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402
from sparsegdn.triton import list_output  # noqa: E402
config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
inputs = kernel_bench.make_inputs(32768)
entry = lambda: kernel_bench.backend_entry(inputs, config)  # noqa: E731
list_output.CLAIM = True
overlap_check.configure(False, 0, 0.0, True)
launcher = list_output.launch_list_output
def direct(grid, *args, **kw):
    return list_output.list_output_kernel[grid](*args, **kw)
for rnd in range(2):
    for name, fn in (("launcher", launcher), ("direct", direct)):
        list_output.launch_list_output = fn
        entry(); entry()
        print(rnd, name, round(overlap_check.host_issue_ms(entry, 30), 3), "plans", len(launcher.plans), flush=True)
