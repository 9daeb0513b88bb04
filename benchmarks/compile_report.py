"""What the compiler makes of the GPU path's kernels for an H200 (sm_90), on any machine, no GPU needed.

    python benchmarks/compile_report.py [--tokens 4096] [--dim 128] [--lines chunk_output_kernel]
        [--loop state_pass_kernel] [--lists-path]

It needs a ptxas: TRITON_PTXAS_PATH where set, else the one Triton's wheel carries (Triton 3.6's does), else
`pip install nvidia-cuda-nvcc-cu12`'s.

Runs the Triton backend's forward on CPU tensors with a stand-in driver that compiles every kernel
launch for sm_90 (every config of an autotuned kernel) and launches nothing, then prints per kernel and
config: registers per thread, machine instructions, spilled bytes, shared memory, asynchronous copies
(the pipeliner's loads into shared memory), Hopper matrix instructions (wgmma) against older ones (mma),
and local-memory instructions in the machine code, and how many programs of each fit a multiprocessor (by
registers, shared memory and threads: `per_sm`). It costs no device time: read it before a GPU batch
(analysis/results/kernel_bench.notes.md). Numbers are the compiler's; only a GPU run says how fast.

`--lists-path` compiles the path that long calls take on an H200 instead (forward.lists_by_default: the chain pass
publishing its progress for the Gluon lists beside it), whose Gluon lists a CPU cannot build (their TMA descriptors):
the lists are stood in for, so the chain pass and pass 3 are compiled as that path launches them, at the settings of
this process's environment, e.g. `SPARSEGDN_STREAM_PREPARE=1` (pass 3 streamed, the chains waiting on its marks) or
`SPARSEGDN_CHAIN_BV=32 SPARSEGDN_CHAIN_WARPS=8`. Give it --tokens of at least 16384 (forward.LISTS_MIN_ROW_CHUNKS).
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


def sourced_instructions(cubin: bytes):
    """(file, line) and the text of each machine instruction, from the cubin's line table (nvdisasm -gi): the
    innermost source line it was compiled from (a helper's line, not its caller's, where the compiler inlined one)."""
    where = ("?", 0)
    for line in on_cubin(cubin, "nvdisasm", "-gi", "-c").splitlines():
        source = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if source:
            where = (source.group(1), int(source.group(2)))
        elif INSTRUCTION.search(line):
            yield where, line


def instructions_by_line(cubin: bytes) -> collections.Counter:
    """Machine instructions per source line ((file, line) -> count; sourced_instructions)."""
    return collections.Counter(where for where, _ in sourced_instructions(cubin))


def innermost_loop(cubin: bytes) -> list[str]:
    """The machine instructions of the kernel's innermost loop with a matrix instruction (the shortest backward
    branch's span that holds one, else the shortest: for the chain pass, one commit, not a wait's spin), from the
    cubin's SASS; [] where it has no loop."""
    sass = on_cubin(cubin, "cuobjdump", "--dump-sass")
    instructions = [(int(match.group(1), 16), match.group(2).strip())
                    for match in re.finditer(r"/\*([0-9a-f]{4,6})\*/\s+([^;]*);", sass)]
    loops = []
    for address, text in instructions:
        branch = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address:
            loops.append((int(branch.group(1), 16), address))
    if not loops:
        return []
    spans = [[text for address, text in instructions if start <= address <= end] for start, end in loops]
    with_products = [span for span in spans if any(re.search(r"\bH(?:G)?MMA\b", text) for text in span)]
    return min(with_products or spans, key=len)


def local_ops_by_line(cubin: bytes) -> dict:
    """Where the kernel's local-memory instructions (spills) are. `local_ops_in_loop`: how many lie in its innermost
    loop with a matrix instruction (each runs once an iteration, e.g. a list's tile; `loop_instructions` is the loop's
    length); `local_ops_outside`: the rest (once a program, or in a loop without a matrix instruction);
    `local_sites`: per source line ("triton/list_output.py:484 STL" -> count, from the line table). A spill is charged
    to the line whose value it holds or reloads, often a loop-invariant address computed before the loop."""
    loop = innermost_loop(cubin)
    in_loop = sum(opcode(instruction) in ("LDL", "STL") for instruction in loop)
    sites = collections.Counter()
    for (path, number), line in sourced_instructions(cubin):
        spill = re.search(r"\b(LDL|STL)\b", line)
        if spill:
            shown = path.split("/sparsegdn/")[-1] if "/sparsegdn/" in path else Path(path).name
            sites[f"{shown}:{number} {spill.group(1)}"] += 1
    return {"loop_instructions": len(loop), "local_ops_in_loop": in_loop,
            "local_ops_outside": sum(sites.values()) - in_loop, "local_sites": dict(sorted(sites.items()))}


def opcode(instruction: str) -> str:
    """An instruction's operation without its predicate and modifiers (`@P0 STG.E.128 ...` -> STG)."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def print_loop(name: str, label: dict, loop: list[str]) -> None:
    """The innermost loop's length and instruction mix, then its synchronisation, matrix and shared-memory store
    instructions in order (what a commit of the chain pass waits on)."""
    mix = collections.Counter(opcode(instruction) for instruction in loop)
    print(f"\n{name} {label}: innermost loop {len(loop)} instructions; " +
          ", ".join(f"{op} {count}" for op, count in mix.most_common(16)))
    shown = re.compile(r"\b(?:BAR|MEMBAR|FENCE|WARPGROUP|HGMMA|HMMA|DEPBAR|STS|STSM|LDG|STL|LDL|UTMASTG)\b")
    for instruction in loop:
        if shown.search(instruction):
            print(f"    {instruction[:110]}")


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
    report["warps"] = compiled.metadata.num_warps
    report["per_sm"] = programs_per_multiprocessor(report["registers"], report["shared"], report["warps"])
    return report


# An H200's multiprocessor (sm_90): four quarters of 16,384 registers, allocated per warp in units of 256 (8 a
# thread), a warp's within one quarter; 228 KB of shared memory, of which a program may take 227 KB and the system 1 KB
# per resident program; 2,048 threads; 32 programs.
QUARTERS, QUARTER_REGISTERS, SHARED_BYTES, SHARED_RESERVED, THREADS, PROGRAMS = 4, 16384, 228 * 1024, 1024, 2048, 32


def programs_per_multiprocessor(registers, shared, warps) -> str:
    """How many programs of a kernel fit one multiprocessor at once, the least of what its registers, shared
    memory and threads allow, with what bounds it ("2 (smem)"); "?" where the cubin's registers were unread."""
    if registers is None:
        return "?"
    warps_by_registers = QUARTERS * (QUARTER_REGISTERS // (-(-registers // 8) * 8 * 32))
    limits = {"regs": warps_by_registers // warps,
              "smem": SHARED_BYTES // (shared + SHARED_RESERVED),
              "threads": THREADS // (32 * warps), "programs": PROGRAMS}
    bound = min(limits, key=limits.get)
    return f"{limits[bound]} ({bound})"


# The constants and launch options that tell one compiled kernel from another in the report
LABELS = ("BV", "STATE_BV", "GROUP", "num_warps", "num_stages", "maxnreg", "PUBLISH", "STREAMED", "TRANSPOSED")


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
            label = {k: v for k, v in options.items() if k in LABELS}
            descriptors = sum(launch.is_descriptor(value) for value in call_args)   # e.g. the chains' TMA snapshots
            if descriptors:
                label["descriptors"] = descriptors
            reports.append(kernel_report(self.jit.fn.__name__, label, compiled))
            if getattr(args, "loop", None) == self.jit.fn.__name__:
                print_loop(args.loop, label, innermost_loop(compiled.asm["cubin"]))
            if getattr(args, "lines", None) == self.jit.fn.__name__:
                print_lines(args.lines, label, instructions_by_line(compiled.asm["cubin"]), args.top)
            if args.dump:
                stem = Path(args.dump) / f"{self.jit.fn.__name__}-{len(reports)}"
                for kind in ("ttgir", "ptx"):
                    stem.with_suffix(f".{kind}").write_text(compiled.asm.get(kind, ""))

    launch.Launcher.__call__ = compile_only
    driver.set_active(CompileOnlyDriver())
    if args.lists_path:
        stand_in_for_the_lists()
    torch.manual_seed(0)
    B, T, H, HV, K = 1, args.tokens, args.heads[0], args.heads[1], args.dim
    inputs = (torch.randn(B, T, H, K, dtype=torch.bfloat16), torch.randn(B, T, H, K, dtype=torch.bfloat16),
              torch.randn(B, T, HV, K, dtype=torch.bfloat16), -torch.rand(B, T, HV) * 0.1,
              torch.rand(B, T, HV, dtype=torch.bfloat16))
    kernel_bench.backend_entry(inputs, SparseConfig(budget=0.29, selector="score", band=1, backend="triton"))
    return reports


def find_ptxas() -> Path | None:
    """A ptxas for sm_90: the one in Triton's wheel, else nvidia-cuda-nvcc-cu12's; None where neither is."""
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if bundled.is_file():
        return bundled
    try:
        import nvidia.cuda_nvcc
    except ImportError:
        return None
    found = [Path(place) / "bin" / "ptxas" for place in nvidia.cuda_nvcc.__path__]
    return next((path for path in found if path.is_file()), None)


class ListsStandIn:
    """list_output.ListCall as forward uses it, launching nothing: its outputs are left empty."""

    def __init__(self, q, k, v, *args, out_dtype, overlap, **options):
        self.overlap, self.shape, self.dtype = overlap, (*v.shape[:3], v.shape[-1]), out_dtype

    def own(self):
        pass

    def with_state(self, snapshots, progress=None, segment=0):
        return torch.empty(self.shape, dtype=self.dtype)


def stand_in_for_the_lists():
    """The long calls' path on this CPU: list_output's conditions that only an H200 meets met, its lists stood in
    for (ListsStandIn), so that forward makes the progress counts (and the streamed marks) and launches pass 3 and
    the publishing chain pass as it does there."""
    from sparsegdn.triton import list_output
    list_output.eligible_inputs = lambda *args, **kwargs: None
    list_output.eligible = lambda *args, **kwargs: None
    list_output.ListCall = ListsStandIn


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, nargs=2, default=[16, 32], metavar=("H", "HV"))
    parser.add_argument("--dim", type=int, default=128, help="K = V")
    parser.add_argument("--dump", help="also write every compiled kernel's TTGIR and PTX into this folder")
    parser.add_argument("--lines", metavar="KERNEL", help="also print where this kernel's machine instructions come "
                                                          "from: its source lines with the most, per config")
    parser.add_argument("--top", type=int, default=25, help="how many source lines --lines prints (default 25)")
    parser.add_argument("--loop", metavar="KERNEL", help="also print this kernel's innermost loop (one commit of "
                        "the chain pass): its instruction mix, barriers and matrix instructions")
    parser.add_argument("--lists-path", action="store_true", help="compile the path long calls take on an H200 (the "
                        "chains publishing for the Gluon lists, which are stood in for): --tokens 16384 or more")
    args = parser.parse_args()
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
    if not os.environ.get("TRITON_PTXAS_PATH"):
        found = find_ptxas()
        if found is None:
            sys.exit("no ptxas found: set TRITON_PTXAS_PATH to one, or pip install nvidia-cuda-nvcc-cu12")
        os.environ["TRITON_PTXAS_PATH"] = str(found)
    reports = compile_all(args)
    columns = ["kernel", "config", "registers", "warps", "per_sm", "instructions", "local_ops", "shared",
               "async_copies", "wgmma", "mma", "hgmma"]
    print(" | ".join(columns))
    for report in reports:
        print(" | ".join(str(report.get(column)) for column in columns))


if __name__ == "__main__":
    main()
