"""A feasibility probe for the output role written in Gluon (Triton's explicit-layout dialect): one chunk's own
output, o = scale M V with M = (P Tinv) diag(beta) and P the decayed causal Q K^T, from pass 1's stored Tinv and
vectors (gamma, k's inverse norms), against the Triton kernel that computes the same (`chunk_output.own_output_kernel`,
the split outputs' own launch with `t_inv` and `vectors` given). Not a product path: a measurement for the next design.

    python benchmarks/gluon_probe.py [--tokens 32768 131072]      # on the GPU: checks, then times both
    python benchmarks/gluon_probe.py --compile                     # anywhere: compiles the Gluon kernel for sm_90

Why (kernel_bench.notes.md, batches 15-21): the output role is latency-bound at two programs an SM, and Triton 3.6
decides where its tiles live (registers, shared memory) and when its products wait. In Gluon the kernel says it:
q, k, v and Tinv go to shared memory once and feed the tensor cores (wgmma) from there, P and M stay in registers as
the next product's left operand, and nothing is converted through shared memory between the products. Gluon
kernels do not run under TRITON_INTERPRET, so this is a GPU measurement only; `--compile` checks the kernel's
compile for sm_90 on a CPU machine (ptxas needed, as for compile_report.py).
Shapes: the kernel benchmark's (B = 1, H = 16, HV = 32, K = V = 128, bf16); T a multiple of 64.
The Gluon kernel has no masks for a ragged T, no non-finite flag and no zero-state test, which the Triton kernel
has (a few percent of its instructions). Status: compiled for sm_90 on a CPU machine (123 registers, 1,312
instructions, 56 KB of shared memory, no spills, against the Triton kernel's 158 / 1,912 / 40 KB: batch 21,
analysis/results/overlap/batch21/gluon_compile.json); not yet run on a GPU.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import kernel_bench                                             # noqa: E402
from sparsegdn.config import CHUNK_SIZE as CHUNK               # noqa: E402
from sparsegdn.reference import relative_error                # noqa: E402

H, HV, DIM = kernel_bench.H, kernel_bench.HV, kernel_bench.K    # the kernel benchmark's heads (K = V)
CHUNK_TOKENS = gl.constexpr(CHUNK)                              # the chunk inside the kernel


@gluon.jit
def own_output_gluon_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, t_inv_ptr, vectors_ptr, o_ptr, scale, NC,
                            H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr,
                            num_warps: gl.constexpr):
    """One program per (chunk, head pair), batch row 0: the chunk's own output (zero entering state)."""
    CHUNK: gl.constexpr = CHUNK_TOKENS
    pid = gl.program_id(0).to(gl.int64)
    hv = pid % HV
    c = pid // HV
    hk = hv // (HV // H)
    t0 = c * CHUNK
    chunk_row = hv * NC + c

    # global -> registers -> shared memory (the products' operands)
    load: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    rows = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, load))
    cols = gl.arange(0, K, layout=gl.SliceLayout(0, load))
    cols64 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, load))
    q = gl.load(q_ptr + (t0 + rows)[:, None] * (H * K) + hk * K + cols[None, :])
    k = gl.load(k_ptr + (t0 + rows)[:, None] * (H * K) + hk * K + cols[None, :])
    v = gl.load(v_ptr + (t0 + rows)[:, None] * (HV * V) + hv * V + cols[None, :])
    t_inv = gl.load(t_inv_ptr + chunk_row * CHUNK * CHUNK + rows[:, None] * CHUNK + cols64[None, :])
    wide: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CHUNK, K], gl.bfloat16)
    square: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CHUNK, CHUNK], gl.bfloat16)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, K], wide, q)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, K], wide, k)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, V], wide, v)
    t_smem = gl.allocate_shared_memory(gl.bfloat16, [CHUNK, CHUNK], square, t_inv)
    fence_async_shared()
    qf = q.to(gl.float32)
    q_scale = gl.rsqrt(gl.sum(qf * qf, axis=1) + 1e-6)            # q's inverse norms, rows of the load layout

    # P = causal(Q K^T * q_scale_i * k_scale_j * exp(gamma_i - gamma_j)), in the accumulator's registers
    acc64: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, CHUNK, 16])
    s = warpgroup_mma(q_smem, k_smem.permute((1, 0)), gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64),
                      use_acc=False, is_async=True)
    i = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc64))
    j = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, acc64))
    gamma_i = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + i)
    gamma_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + j)
    k_scale_j = gl.load(vectors_ptr + chunk_row * 2 * CHUNK + CHUNK + j)
    beta_j = gl.load(beta_ptr + (t0 + j) * HV + hv).to(gl.float32)
    q_scale_i = gl.convert_layout(q_scale, gl.SliceLayout(1, acc64))
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    causal = i[:, None] >= j[None, :]
    decay = gl.exp(gl.minimum(gl.where(causal, gamma_i[:, None] - gamma_j[None, :], 0.0), 0.0))
    p = gl.where(causal, s * (q_scale_i[:, None] * k_scale_j[None, :]) * decay, 0.0)

    # M = (P Tinv) diag(beta): P as the left operand in registers, Tinv from shared memory
    p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc64, k_width=2))
    m = warpgroup_mma(p_op, t_smem, gl.zeros([CHUNK, CHUNK], gl.float32, layout=acc64), use_acc=False,
                      is_async=True)
    m = warpgroup_mma_wait(num_outstanding=0, deps=(m,))
    m = m * beta_j[None, :]

    # o = scale M V
    acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, V, 16])
    m_op = gl.convert_layout(m.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2))
    o = warpgroup_mma(m_op, v_smem, gl.zeros([CHUNK, V], gl.float32, layout=acc_o), use_acc=False, is_async=True)
    o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
    out_rows = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, acc_o))
    out_cols = gl.arange(0, V, layout=gl.SliceLayout(0, acc_o))
    gl.store(o_ptr + (t0 + out_rows)[:, None] * (HV * V) + hv * V + out_cols[None, :], (o * scale).to(gl.bfloat16))


def own_output_gluon(q, k, v, beta, t_inv, vectors, o, scale):
    n_chunks = q.shape[1] // CHUNK
    own_output_gluon_kernel[(n_chunks * HV,)](q, k, v, beta, t_inv, vectors, o, scale, n_chunks, H, HV, DIM, DIM,
                                             num_warps=4)


def compile_only():
    """The Gluon kernel compiled for sm_90 through compile_report's compile-only driver: its machine code's size."""
    import compile_report
    from triton.runtime.driver import driver
    driver.set_active(compile_report.CompileOnlyDriver())
    q = torch.empty(1, 128, H, DIM, dtype=torch.bfloat16)
    v = torch.empty(1, 128, HV, DIM, dtype=torch.bfloat16)
    beta = torch.empty(1, 128, HV, dtype=torch.bfloat16)
    t_inv = torch.empty(1, HV, 2, CHUNK, CHUNK, dtype=torch.bfloat16)
    vectors = torch.empty(1, HV, 2, 2, CHUNK)
    compiled = own_output_gluon_kernel.warmup(q, q, v, beta, t_inv, vectors, v, 0.1, 2, H, HV, DIM, DIM,
                                              num_warps=4, grid=(1,))
    report = compile_report.kernel_report("own_output_gluon_kernel", {"num_warps": 4}, compiled)
    print(json.dumps(report))
    return report


def measure(tokens_list):
    from sparsegdn.triton import chunk_loads
    from sparsegdn.triton.chunk_output import own_outputs
    from sparsegdn.triton.intra_chunk import intra_chunk

    rows = []
    for tokens in tokens_list:
        q, k, v, g, beta = kernel_bench.make_inputs(tokens)
        n_chunks = tokens // CHUNK
        flags = torch.zeros(chunk_loads.NUM_FLAGS, dtype=torch.int32, device="cuda")
        t_inv, _, _, _, vectors = intra_chunk(k, v, g, beta, flags, band=1, normalize=True, num_value_heads=HV,
                                              num_chunks=n_chunks, store_inverse=True, store_vectors=True)
        schedule = type("Schedule", (), {})()          # every chunk starts from snapshot 0: all outputs are own ones
        schedule.events = torch.zeros(1, HV, n_chunks, dtype=torch.bool, device="cuda")
        schedule.snapshot_of_chunk = torch.zeros(1, HV, n_chunks, dtype=torch.int64, device="cuda")
        scale = DIM ** -0.5
        o_triton = torch.empty_like(v)
        o_gluon = torch.empty_like(v)

        def run_triton():
            own_outputs(q, k, v, g, beta, t_inv, schedule, flags, o_triton, scale=scale, normalize=True, band=1,
                        vectors=vectors)

        def run_gluon():
            own_output_gluon(q, k, v, beta, t_inv, vectors, o_gluon, scale)

        run_triton()
        run_gluon()
        torch.cuda.synchronize()
        difference = relative_error(o_gluon, o_triton)
        # a torch check of a few chunks and head pairs, from the same stored Tinv and vectors
        worst = 0.0
        for c, hv in ((0, 0), (n_chunks // 2, 7), (n_chunks - 1, HV - 1)):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            gamma, k_scale = vectors[0, hv, c, 0], vectors[0, hv, c, 1]
            qc, kc = q[0, sl, hv // (HV // H)].float(), k[0, sl, hv // (HV // H)].float()
            q_scale = torch.rsqrt((qc * qc).sum(-1) + 1e-6)
            decay = torch.exp(torch.clamp(gamma[:, None] - gamma[None, :], max=0.0)).tril()
            p = (qc @ kc.T * q_scale[:, None] * k_scale[None, :] * decay).bfloat16().float()
            m = (p @ t_inv[0, hv, c].float() * beta[0, sl, hv].float()[None, :]).bfloat16().float()
            expected = m @ v[0, sl, hv].float() * scale
            got = o_gluon[0, sl, hv].float()
            worst = max(worst, relative_error(got, expected))
        triton_ms = triton.testing.do_bench(run_triton)
        gluon_ms = triton.testing.do_bench(run_gluon)
        triton_ms_2 = triton.testing.do_bench(run_triton)
        gluon_ms_2 = triton.testing.do_bench(run_gluon)
        row = {"T": tokens, "programs": n_chunks * HV, "triton_own_ms": [triton_ms, triton_ms_2],
               "gluon_own_ms": [gluon_ms, gluon_ms_2], "gluon_vs_triton_rel": difference,
               "gluon_vs_torch_rel_worst": worst}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--compile", action="store_true", help="compile the Gluon kernel for sm_90 only (no GPU)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    result = compile_only() if args.compile else measure(args.tokens)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
