"""benchmarks/compile_report.py's reading of a compiled kernel's machine code (sm_90, compiled on the CPU with the
ptxas Triton's wheel carries; nothing launched): where the spills of a register-capped loop are."""
import json
import os
import subprocess
import sys
import textwrap

from fresh_process import ROOT

KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def looped(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        rows = tl.arange(0, BLOCK)
        tile = rows[:, None] * BLOCK + rows[None, :]
        a = tl.load(x_ptr + tile)
        acc = tl.zeros([BLOCK, BLOCK], tl.float32)
        other = tl.zeros([BLOCK, BLOCK], tl.float32)
        for step in range(n):
            b = tl.load(x_ptr + step * BLOCK * BLOCK + tile)
            acc += tl.dot(a, b)
            other += tl.dot(b, a)
        tl.store(y_ptr + tile, acc + other)
''')

COMPILE = textwrap.dedent('''
    import json, os, sys
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path[:0] = [sys.argv[1], "benchmarks"]
    import torch
    from triton.runtime.driver import driver
    import compile_report
    from looped_kernel import looped
    driver.set_active(compile_report.CompileOnlyDriver())
    x, y = torch.empty(4, 64, 64, dtype=torch.float16), torch.empty(64, 64, dtype=torch.float32)
    rows = {}
    for cap in (None, 64):
        compiled = looped.warmup(x, y, 4, BLOCK=64, num_warps=4, grid=(1,), **({} if cap is None else {"maxnreg": cap}))
        rows[str(cap)] = {**compile_report.machine_code_report(compiled.asm["cubin"]),
                          **compile_report.local_ops_by_line(compiled.asm["cubin"])}
    print(json.dumps(rows))
''')


def test_a_capped_loops_spills_are_counted_in_the_loop_and_charged_to_its_source_lines(tmp_path):
    (tmp_path / "looped_kernel.py").write_text(KERNEL)
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    free, capped = rows["None"], rows["64"]
    assert free["local_ops"] == 0 and free["local_ops_in_loop"] == 0 and free["local_sites"] == {}
    assert free["loop_instructions"] > 0 and free["hgmma"] > 0     # the loop found by its matrix instruction
    # uncapped it takes ~90 registers (two 64 x 64 float32 accumulators, 32 a thread each): at 64 it spills, in the loop
    assert free["registers"] > 64
    assert capped["registers"] == 64 and capped["local_ops"] > 0
    assert 0 < capped["local_ops_in_loop"] <= capped["local_ops"]
    assert capped["local_ops_in_loop"] + capped["local_ops_outside"] == capped["local_ops"]
    assert sum(capped["local_sites"].values()) == capped["local_ops"]
    lines = {site.split()[0] for site in capped["local_sites"]}
    assert any(site.startswith("looped_kernel.py:") for site in lines), lines
    assert all(site.split()[1] in ("LDL", "STL") for site in capped["local_sites"])


def _chain_pass_ptx(tmp_path, name, **settings):
    """The publishing chain pass (the lists' route at 16K, the lists stood in for) compiled for sm_90 under `settings`
    (SPARSEGDN_* read at import), its PTX from compile_report --dump."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | settings
    folder = tmp_path / name
    done = subprocess.run([sys.executable, "benchmarks/compile_report.py", "--tokens", "16384", "--lists-path",
                           "--dump", str(folder)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (ptx,) = folder.glob("state_pass_kernel-*.ptx")
    return ptx.read_text()


def test_counts_released_inside_the_chains_loop_follow_a_barrier(tmp_path):
    """state_pass.PUBLISH_IN_LOOP: the chains' one loop keeps Triton's pipeliner (asynchronous copies of the next
    events) and releases its counts inside it, with no barrier of its own; the count released at a commit covers the
    snapshots of the commits before it, which every thread stored before the loop header's bar.sync (the barrier
    ahead of the commit's first product), so that bar.sync must be on every path round the loop. Compiled for sm_90
    at blocks of 32 and 16; the runs' form (the default) releases outside its pipelined loop."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import compile_report
    for bv in ("32", "16"):
        loops = compile_report.release_loops(_chain_pass_ptx(tmp_path, f"in-loop-{bv}", SPARSEGDN_CHAIN_BV=bv,
                                                             SPARSEGDN_CHAIN_PUBLISH_IN_LOOP="1"))
        assert len(loops) == 1, loops
        (facts,) = loops.values()
        assert facts == {"innermost": True, "barrier_in_header": True, "releases": True, "async_copies": True,
                         "global_stores": True}, (bv, facts)
    runs = compile_report.release_loops(_chain_pass_ptx(tmp_path, "runs"))
    assert runs and not any(facts["innermost"] for facts in runs.values()), runs
