"""What the compiler makes of the GPU path's kernels for an H200 (sm_90), on any machine, no GPU needed.

    pip install nvidia-cuda-nvcc-cu12        # ptxas, once (Triton's CPU wheels carry no ptxas)
    TRITON_PTXAS_PATH=$(python -c "import nvidia.cuda_nvcc, os; print(os.path.dirname(nvidia.cuda_nvcc.__file__))")/bin/ptxas \
        python benchmarks/compile_report.py [--tokens 4096] [--dim 128] [--lines chunk_output_kernel]

Runs the Triton backend's forward on CPU tensors with a stand-in driver that compiles every kernel
launch for sm_90 (every config of an autotuned kernel) and launches nothing, then prints per kernel and
config: registers per thread, machine instructions, spilled bytes, shared memory, asynchronous copies
(the pipeliner's loads into shared memory), Hopper matrix instructions (wgmma) against older ones (mma),
and local-memory instructions in the machine code. It costs no device time: read it before a GPU batch
(analysis/results/kernel_bench.notes.md). Numbers are the compiler's; only a GPU run says how fast.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("TRITON_INTERPRET", None)

import torch                                   # noqa: E402
import triton                                  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver       # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


class CompileOnlyDriver:
    """Triton's driver interface as far as compiling needs it: an sm_90 target, device 0, no stream."""

    def get_current_target(self):
        return TARGET

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,6}\*/\s+\S")     # a line of SASS holding an instruction (its address)


def on_cubin(cubin: bytes, tool: str, *flags: str) -> str:
    """The output of one of Triton's bundled NVIDIA tools (cuobjdump, nvdisasm) run on a cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool
        return subprocess.run([str(path), *flags, file.name], capture_output=True, text=True).stdout


def machine_code_report(cubin: bytes) -> dict:
    """Registers and local-memory instructions from the cubin (cuobjdump), when it can be read."""
    usage = on_cubin(cubin, "cuobjdump", "--dump-resource-usage")
    sass = on_cubin(cubin, "cuobjdump", "--dump-sass")
    registers = re.search(r"REG:(\d+)", usage)
    return {"registers": int(registers.group(1)) if registers else None,
            # the machine code's length: what a warp runs per call in straight-line kernels (loops run theirs again)
            "instructions": len(INSTRUCTION.findall(sass)),
            "local_ops": len(re.findall(r"\b(?:LDL|STL)\b", sass)),
            "hgmma": len(re.findall(r"\bHGMMA\b", sass)), "hmma": len(re.findall(r"\bHMMA\b", sass))}


def instructions_by_line(cubin: bytes) -> collections.Counter:
    """Machine instructions per source line ((file, line) -> count) from the cubin's line table (nvdisasm -gi):
    each instruction counts for the innermost source line it was compiled from (a helper's line, not its
    caller's, where the compiler inlined one)."""
    counts, where = collections.Counter(), ("?", 0)
    for line in on_cubin(cubin, "nvdisasm", "-gi", "-c").splitlines():
        source = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if source:
            where = (source.group(1), int(source.group(2)))
        elif INSTRUCTION.search(line):
            counts[where] += 1
    return counts


def print_lines(name: str, label: dict, counts: collections.Counter, top: int) -> None:
    """The `top` source lines with the most machine instructions, with their text."""
    total = sum(counts.values())
    print(f"\n{name} {label}: {total} instructions; the {top} source lines with the most")
    for (path, number), count in counts.most_common(top):
        try:
            text = Path(path).read_text().splitlines()[number - 1].strip()
        except (OSError, IndexError):
            text = ""
        shown = path.split("/sparsegdn/")[-1] if "/sparsegdn/" in path else Path(path).name
        print(f"{count:6d} {count / total:6.1%}  {shown}:{number}  {text[:90]}")


def kernel_report(name, config, compiled) -> dict:
    ttgir = compiled.asm.get("ttgir", "")
    ptx = compiled.asm.get("ptx", "")
    report = {"kernel": name, "config": config, "shared": compiled.metadata.shared,
              "async_copies": ttgir.count("async_copy_global_to_local"), "tma_loads": ttgir.count("async_tma_copy"),
              "wgmma": ptx.count("wgmma.mma_async"), "mma": len(re.findall(r"\bmma\.sync", ptx)),
              "spill_bytes": None}
    report.update(machine_code_report(compiled.asm["cubin"]))
    return report


def compile_all(args) -> list[dict]:
    import kernel_bench
    from sparsegdn import SparseConfig
    from sparsegdn.triton import launch

    reports = []

    def compile_only(self, grid, *call_args, **constants):
        configs = self.kernel.configs if self.autotuned else [None]
        if self.autotuned and self.kernel.early_config_prune and len(configs) > 1:    # what the autotuner would try
            #                                                          (with one config it prunes nothing)
            configs = self.kernel.early_config_prune(configs, dict(zip(self.kernel.arg_names, call_args)),
                                                     **constants)
        for config in configs:
            options = {**constants}
            if config is not None:
                options.update(config.all_kwargs())
            compiled = self.jit.warmup(*call_args, grid=(1,), **options)
            label = {k: v for k, v in options.items() if k in ("BV", "STATE_BV", "GROUP", "num_warps", "num_stages", "maxnreg")}
            reports.append(kernel_report(self.jit.fn.__name__, label, compiled))
            if getattr(args, "lines", None) == self.jit.fn.__name__:
                print_lines(args.lines, label, instructions_by_line(compiled.asm["cubin"]), args.top)
            if args.dump:
                stem = Path(args.dump) / f"{self.jit.fn.__name__}-{len(reports)}"
                for kind in ("ttgir", "ptx"):
                    stem.with_suffix(f".{kind}").write_text(compiled.asm.get(kind, ""))

    launch.Launcher.__call__ = compile_only
    driver.set_active(CompileOnlyDriver())
    torch.manual_seed(0)
    B, T, H, HV, K = 1, args.tokens, args.heads[0], args.heads[1], args.dim
    inputs = (torch.randn(B, T, H, K, dtype=torch.bfloat16), torch.randn(B, T, H, K, dtype=torch.bfloat16),
              torch.randn(B, T, HV, K, dtype=torch.bfloat16), -torch.rand(B, T, HV) * 0.1,
              torch.rand(B, T, HV, dtype=torch.bfloat16))
    kernel_bench.backend_entry(inputs, SparseConfig(budget=0.29, selector="score", band=1, backend="triton"))
    return reports


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, nargs=2, default=[16, 32], metavar=("H", "HV"))
    parser.add_argument("--dim", type=int, default=128, help="K = V")
    parser.add_argument("--dump", help="also write every compiled kernel's TTGIR and PTX into this folder")
    parser.add_argument("--lines", metavar="KERNEL", help="also print where this kernel's machine instructions come "
                                                          "from: its source lines with the most, per config")
    parser.add_argument("--top", type=int, default=25, help="how many source lines --lines prints (default 25)")
    args = parser.parse_args()
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
    if not os.environ.get("TRITON_PTXAS_PATH"):
        sys.exit("set TRITON_PTXAS_PATH to a ptxas (see the docstring)")
    reports = compile_all(args)
    columns = ["kernel", "config", "registers", "instructions", "local_ops", "shared", "async_copies", "wgmma", "mma",
               "hgmma"]
    print(" | ".join(columns))
    for report in reports:
        print(" | ".join(str(report.get(column)) for column in columns))


if __name__ == "__main__":
    main()
