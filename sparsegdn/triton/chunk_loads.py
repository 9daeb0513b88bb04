"""Tile loaders, the matrix product and rounding shared by the SparseGDN kernels.

Loaders read one chunk's rows of q/k/v/g/beta, zero past T.
Zero rows past T are neutral everywhere (g = 0: no decay, beta = 0 and k = 0: no write), the same
padding as `sparsegdn.reference.to_chunks`.
"""
import os

import torch
import triton
import triton.language as tl

NORM_EPS = tl.constexpr(1e-6)
INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")
# Autotuning compiles every config for every new shape: on by default, off for quick GPU test runs.
AUTOTUNE = os.environ.get("SPARSEGDN_AUTOTUNE", "1") == "1" and not INTERPRET


@triton.jit
def load_rows(ptr, row0, num_rows, row_stride, num_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """float32 [ROWS, COLS] from rows row0.. of a row-strided matrix; zero outside num_rows x num_cols."""
    rows = row0 + tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    mask = (rows < num_rows)[:, None] & (cols < num_cols)[None, :]
    offsets = rows[:, None].to(tl.int64) * row_stride + cols[None, :]
    return tl.load(ptr + offsets, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def load_tile(ptr, row0, num_rows, row_stride, num_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """[ROWS, COLS] in the stored dtype (a dot operand as it is); zero outside num_rows x num_cols."""
    rows = row0 + tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    mask = (rows < num_rows)[:, None] & (cols < num_cols)[None, :]
    return tl.load(ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def inverse_norm(x, NORMALIZE: tl.constexpr):
    """float32 [ROWS]: rsqrt(sum(x^2) + 1e-6) per row when NORMALIZE, else ones. Scaling the products
    of raw tiles by it equals normalising first, with one rounding less."""
    xf = x.to(tl.float32)
    if NORMALIZE:
        return tl.rsqrt(tl.sum(xf * xf, axis=1) + NORM_EPS)
    return tl.sum(xf * 0.0, axis=1) + 1.0


@triton.jit
def load_gates(ptr, row0, num_rows, row_stride, ROWS: tl.constexpr):
    """float32 [ROWS] of a per-token gate (g or beta); zero past num_rows."""
    rows = row0 + tl.arange(0, ROWS)
    return tl.load(ptr + rows.to(tl.int64) * row_stride, mask=rows < num_rows, other=0.0).to(tl.float32)


@triton.jit
def mma(a, b):
    """a @ b with float32 accumulation. The interpreter multiplies bfloat16 bit patterns as integers,
    so there the (already rounded) operands are widened first: same values, same result."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    if a.dtype == tl.float32:      # float32 inputs: three tf32 products, near float32 accuracy
        return tl.dot(a, b, input_precision="tf32x3")
    return tl.dot(a, b)


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """x in dtype, rounded to nearest even as on the GPU (the interpreter's own cast truncates, which
    biases every bfloat16 rounding the same way and inflates errors several times)."""
    if dtype == tl.float32:
        return x.to(tl.float32)
    if INTERPRET and dtype == tl.bfloat16:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def grouped_program(pid, NC, H: tl.constexpr, HV: tl.constexpr, GROUP: tl.constexpr):
    """A program's (value head, chunk group, batch row, key head) when each program takes GROUP chunks."""
    n_groups = tl.cdiv(NC, GROUP)
    hv = pid % HV
    group = (pid // HV) % n_groups
    b = pid // (HV * n_groups)
    return hv, group, b, hv // (HV // H)


def solve_outputs(k, num_value_heads):
    """The buffers both intra-chunk solvers fill: t_inv [B,HV,NC,64,64] in k's dtype and three float32
    statistics [3,B,HV,NC] (gamma_L, write, read); plus the dot precision for k's dtype."""
    batch, tokens = k.shape[:2]
    n_chunks = triton.cdiv(tokens, 64)
    t_inv = torch.empty(batch, num_value_heads, n_chunks, 64, 64, device=k.device, dtype=k.dtype)
    stats = torch.empty(3, batch, num_value_heads, n_chunks, device=k.device, dtype=torch.float32)
    return t_inv, stats, ("ieee" if k.dtype == torch.float32 else "tf32")

