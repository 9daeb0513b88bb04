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


def _chain_pass_ptx(tmp_path, name, kernel="state_pass_kernel", tokens="16384", **settings):
    """`kernel`'s PTX (every config compiled) as the backend's forward launches it at `tokens` (from 16384 the lists'
    route, the lists stood in for: --lists-path; below, the one launch), compiled for sm_90 under `settings`
    (SPARSEGDN_* read at import), from compile_report --dump."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"} | settings
    folder = tmp_path / name
    route = ["--lists-path"] if int(tokens) >= 16384 else []
    done = subprocess.run([sys.executable, "benchmarks/compile_report.py", "--tokens", tokens, *route,
                           "--dump", str(folder)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = sorted(folder.glob(f"{kernel}-*.ptx"))
    assert found, sorted(path.name for path in folder.iterdir())
    return [path.read_text() for path in found]


def test_release_loops_reads_where_a_loops_release_stands():
    """ptx_loops.release_loops on hand-written PTX: a bar.sync in the header's block ahead of the release counts;
    a release ahead of the bar.sync, or a release in an outer loop (a child loop inside it), reads as such."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ptx_loops
    header = "$L__BB0_1:  // =>This Inner Loop Header: Depth=1\n"
    body = ["bar.sync 0;", "st.global.b32 [%rd2], %r3;", "cp.async.cg.shared.global [%r1], [%rd1], 16;"]
    release = "@%p4 atom.global.gpu.release.exch.b32 %r1, [%rd1], %r2;"
    branch = "@%p1 bra $L__BB0_1;"
    after = ptx_loops.release_loops(header + "\n".join(body + [release, branch]))
    assert after == {"BB0_1": {"innermost": True, "barrier_in_header": True, "releases": True, "async_copies": True,
                               "global_stores": True}}
    before = ptx_loops.release_loops(header + "\n".join([release] + body + [branch]))
    assert not before["BB0_1"]["barrier_in_header"]
    outer = ("$L__BB0_1:  // =>This Loop Header: Depth=1\n  //     Child Loop BB0_2 Depth 2\nbar.sync 0;\n"
             "$L__BB0_2:  //   Parent Loop BB0_1 Depth=1\n  // =>  This Inner Loop Header: Depth=2\n"
             "cp.async.cg.shared.global [%r1], [%rd1], 16;\n@%p2 bra $L__BB0_2;\n"
             "// %bb.3:  //   in Loop: Header=BB0_1 Depth=1\n" + release + "\n" + branch)
    assert ptx_loops.release_loops(outer) == {"BB0_1": {"innermost": False, "barrier_in_header": True,
                                                             "releases": True, "async_copies": False,
                                                             "global_stores": False}}
    assert ptx_loops.release_loops(header + "\n".join(body + [branch])) == {}     # nothing released


def test_counts_released_inside_the_chains_loop_follow_a_barrier(tmp_path):
    """state_pass.PUBLISH_IN_LOOP: the chains' one loop keeps Triton's pipeliner (asynchronous copies of the next
    events) and releases its counts inside it, with no barrier of its own; the count released at a commit covers the
    snapshots of the commits before it, which every thread stored before the loop header's bar.sync (the barrier
    ahead of the commit's first product), so that bar.sync must be on every path round the loop. Compiled for sm_90:
    the lists' route's chain pass at blocks of 32, 16, 8 (the older mma) and 64, and the one launch's chain programs
    (each of its configs); the runs' form (the default) releases outside its pipelined loop."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ptx_loops
    in_loop = {"SPARSEGDN_CHAIN_PUBLISH_IN_LOOP": "1"}
    compiled = [(f"lists-bv{bv}", ptx) for bv in ("32", "16", "8", "64")
                for ptx in _chain_pass_ptx(tmp_path, f"in-loop-{bv}", SPARSEGDN_CHAIN_BV=bv, **in_loop)]
    compiled += [("one-launch", ptx) for ptx in _chain_pass_ptx(tmp_path, "one-launch", kernel="state_output_kernel",
                                                                tokens="4096", **in_loop)]
    assert len(compiled) >= 5
    for name, ptx in compiled:
        loops = ptx_loops.release_loops(ptx)
        assert len(loops) == 1, (name, loops)
        (facts,) = loops.values()
        assert facts == {"innermost": True, "barrier_in_header": True, "releases": True, "async_copies": True,
                         "global_stores": True}, (name, facts)
    (runs,) = _chain_pass_ptx(tmp_path, "runs")
    runs = ptx_loops.release_loops(runs)
    assert runs and not any(facts["innermost"] for facts in runs.values()), runs


SELECT_FORMS = textwrap.dedent('''
    import json, os, sys
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path[:0] = ["benchmarks"]
    import torch
    from triton.runtime.driver import driver
    import compile_report
    from sparsegdn.triton import schedule
    driver.set_active(compile_report.CompileOnlyDriver())
    rows = {}
    block = 4096                                   # a row of the kernel benchmark at 8K tokens: 32 head pairs x 128
    scores, events = torch.empty(block, dtype=torch.float32), torch.empty(block, dtype=torch.uint8)
    for bits, keys in ((1, 64), (2, 64), (1, 8), (4, 8), (8, 8)):
        schedule.SELECT_THREAD_KEYS = keys
        _, placeholders, constants = schedule.no_scan(scores)
        compiled = schedule.select_kernel.warmup(
            scores, events, block, 1188, 1, *placeholders, BLOCK=block, STEP_BITS=bits, SCAN=False, **constants,
            num_warps=schedule.resident_warps(block), grid=(1,))
        rows[f"{bits}/{keys}"] = compile_report.machine_code_report(compiled.asm["cubin"])
    print(json.dumps(rows))
''')


def test_select_kernel_compiles_for_sm_90_in_every_search_form():
    """select_kernel's searches (a bit, two bits, or a histogram of four or eight bits a step: SELECT_STEP_BITS; at
    64 or 8 keys a thread: SELECT_THREAD_KEYS) compiled for sm_90 at the benchmark's 8K row (4,096 keys), as the
    launch compiles them. The interpreter runs forms that do not compile (the byte search first failed here, a named
    constexpr assigned in a static_range loop); at this row none spills."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", SELECT_FORMS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert sorted(rows) == ["1/64", "1/8", "2/64", "4/8", "8/8"]
    for form, row in rows.items():
        assert row["instructions"] > 0 and row["local_ops"] == 0, (form, row)
