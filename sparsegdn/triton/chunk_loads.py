"""Tile loaders, the matrix products, rounding and checks shared by the SparseGDN kernels.

Every input is read through explicit strides: batch, token and head (q and k with the last dimension
contiguous), v through its head-dimension stride too, g and beta through all of theirs. So the views a
model hands over (q, k, v split from one projection; v with the tokens innermost) are read in place.
Loaders read one chunk's rows, zero past T. Zero rows past T are neutral everywhere (g = 0: no
decay, beta = 0 and k = 0: no write), the same padding as `sparsegdn.reference.to_chunks`.
"""
import os

import torch
import triton
import triton.language as tl

from ..config import BLOCK_SIZE, CHUNK_SIZE
from ..validation import ERROR_FLAGS

CHUNK = tl.constexpr(CHUNK_SIZE)   # tokens per chunk
BLOCK = tl.constexpr(BLOCK_SIZE)   # rows of one block of the band solver
BLOCKS = tl.constexpr(CHUNK_SIZE // BLOCK_SIZE)
NORM_EPS = tl.constexpr(1e-6)
INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")
# Autotuning compiles every config for every new shape: on by default, off for quick GPU test runs.
AUTOTUNE = os.environ.get("SPARSEGDN_AUTOTUNE", "1") == "1" and not INTERPRET
INF = tl.constexpr(float("inf"))
# Per-row scales of a product's right operand folded into its 64 x 64 left factor's columns: F (diag(s) X) =
# (F diag(s)) X, so that X (a 64 x K or 64 x V tile of k or v) goes to the product as loaded and only 64 x 64
# values are scaled and rounded. The output role (chunk_output: M X and M (beta V)) and the event lists
# (event_prepare: Tinv (beta e^gamma K) and Tinv (beta V)) both do it when SPARSEGDN_FOLD_SCALES=1 (read at
# compile time; off: not yet measured on a GPU). Why: those passes are latency-bound on element-wise work,
# conversions and spills (ncu and compile_report, 2026-12-01, kernel_bench.notes.md).
FOLD_SCALES = tl.constexpr(os.environ.get("SPARSEGDN_FOLD_SCALES", "0") == "1")
# The contract's ranges (sparsegdn.validation): g in [LOWEST_LOG_DECAY, 0], beta in [0, 1].
LOWEST_LOG_DECAY = tl.constexpr(-torch.finfo(torch.float32).max / CHUNK_SIZE)

# Slots of the flags buffer the kernels raise instead of separate passes over the inputs.
FLAG_OUTPUT = tl.constexpr(0)        # o (as stored) or the final state has a NaN or inf (NaN and inf in q, k or v always reach o)
FLAG_GATES = tl.constexpr(1)         # g or beta not finite or out of range
FLAG_INITIAL_STATE = tl.constexpr(2)  # the initial state not finite
FLAG_WAIT = tl.constexpr(3)          # early checks: a head vector of q, k or v (one token's) with a norm above
                                     # WAIT_BOUND or not finite, or an element of the initial state above it or not
                                     # finite, or g below -WAIT_BOUND; the caller then waits for every flag
NUM_FLAGS = 4
assert ERROR_FLAGS == FLAG_WAIT.value, "the error slots come first, FLAG_WAIT after them (validation reads them so)"
# The early checks (forward.EARLY_CHECKS) let the public call return once pass 1 has run when every head vector of q, k
# and v (one token's) has a norm of at most this, every element of the initial state is at most this in magnitude, g
# is at least -WAIT_BOUND and g and beta are in range. Norms, not elements: pass 1 has k's and v's rows' sums of squares
# anyway (a compare of 64 values instead of a tile's); a norm bound implies the element bound.
# Why a bound and not only finiteness: the call then returns before o is written, so an overflow of o from finite
# inputs (ResultOverflowError when the call waits) must be out of reach. With normalised keys, a scale of at most 1
# and every head vector of q, k and v within norm 2^12, a state whose commits do not expand (band 3's: they contract)
# stays within ||S0|| + sum beta ||v|| ~ 6e9 at 128K tokens and heads of 128, and |o| under ~1e10; 3.4e38
# (bfloat16's and float32's largest) needs the state to grow by a further ~1e28. Bands 0-2's band-projected commits
# can expand: random keys stay near contracting, but keys chosen to do so reach ~3.7x a commit at band 1
# (state_pass.warm_up_begin), ~50 such commits without decay. There, with the early checks on, an overflow of o is
# returned without its ResultOverflowError. Raw keys (commits that can expand without bound), scales above 1 and
# float16 outputs (largest 65504) always wait (forward.early_checks).
WAIT_BOUND = tl.constexpr(4096.0)


@triton.jit
def load_rows(ptr, row0, num_rows, row_stride, col_stride, num_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """float32 [ROWS, COLS] from rows row0.. of a strided matrix; zero outside num_rows x num_cols.
    Any strides: a model's v can come with the tokens innermost (a transposed convolution output),
    read in place with each column's tokens contiguous (Triton specialises a stride of 1)."""
    return load_rows_stored(ptr, row0, num_rows, row_stride, col_stride, num_cols, ROWS, COLS).to(tl.float32)


@triton.jit
def load_rows_stored(ptr, row0, num_rows, row_stride, col_stride, num_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """As load_rows, in the stored dtype (a dot operand as it is)."""
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    mask = (rows < rows_left(row0, num_rows, ROWS))[:, None] & (cols < num_cols)[None, :]
    offsets = rows[:, None] * row_stride + cols[None, :] * col_stride      # in the tile: int32 (tile_view)
    return tl.load(ptr + row0.to(tl.int64) * row_stride + offsets, mask=mask, other=0.0)


@triton.jit
def load_tile(ptr, row0, num_rows, row_stride, num_cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    """[ROWS, COLS] in the stored dtype (a dot operand as it is); zero outside num_rows x num_cols."""
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    mask = (rows < rows_left(row0, num_rows, ROWS))[:, None] & (cols < num_cols)[None, :]
    return tl.load(ptr + row0.to(tl.int64) * row_stride + (rows[:, None] * row_stride + cols[None, :]), mask=mask,
                   other=0.0)


@triton.jit
def load_gates(ptr, row0, num_rows, row_stride, ROWS: tl.constexpr):
    """float32 [ROWS] of a per-token gate (g or beta); zero past num_rows."""
    rows = tl.arange(0, ROWS)
    mask = rows < rows_left(row0, num_rows, ROWS)
    return tl.load(ptr + row0.to(tl.int64) * row_stride + rows * row_stride, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def rows_left(row0, num_rows, ROWS: tl.constexpr):
    """How many of the tile's ROWS rows from row0 exist (at most ROWS; int32, so that the masks stay int32)."""
    return tl.minimum(num_rows - row0, ROWS).to(tl.int32)


@triton.jit
def inverse_norm(x, NORMALIZE: tl.constexpr):
    """float32 [ROWS]: rsqrt(sum(x^2) + 1e-6) per row when NORMALIZE, else ones. Scaling the products
    of raw tiles by it equals normalising first, with one rounding less."""
    xf = x.to(tl.float32)
    if NORMALIZE:
        return tl.rsqrt(tl.sum(xf * xf, axis=1) + NORM_EPS)
    return tl.sum(xf * 0.0, axis=1) + 1.0


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
def mma_into(acc, a, b):
    """acc + a @ b (float32 acc), the sum formed by the product itself, as mma forms a @ b."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    if a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    return tl.dot(a, b, acc)


@triton.jit
def fdot(a, b, PRECISION: tl.constexpr):
    """Product of float32 tiles (2D or batched 3D) for the intra-chunk solve: tf32 on the GPU when the
    inputs are 16-bit (their own rounding dominates), exact float32 ("ieee") for float32 inputs."""
    if INTERPRET:
        return tl.dot(a, b)
    return tl.dot(a, b, input_precision=PRECISION)


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
def not_finite(x):
    """True where x is NaN or infinite (a NaN fails every comparison)."""
    return ~(tl.abs(x) < INF)


@triton.jit
def any_not_finite(x):
    """int32 scalar: 1 when any element of a 2D tile is NaN or infinite. The sum of x * 0 is NaN exactly then
    (0 for finite values): one multiply-add an element instead of a compare and a select."""
    return not_finite(tl.sum(tl.sum(x.to(tl.float32) * 0.0, axis=1), axis=0)).to(tl.int32)


@triton.jit
def any_beyond(x, bound: tl.constexpr):
    """int32 scalar: 1 when any element of a 2D tile is NaN, infinite or above `bound` in magnitude (one compare:
    NaN fails it)."""
    return any_2d(~(tl.abs(x.to(tl.float32)) <= bound))


@triton.jit
def any_row_beyond(squares, bound: tl.constexpr):
    """int32 scalar: 1 when any of a tile's rows, given by its sums of squares (float32 [ROWS]), has a norm above
    `bound` or is not finite (a NaN fails the compare; an element past ~1.8e19 squares to inf)."""
    return tl.max((~(squares <= bound * bound)).to(tl.int32), axis=0)


@triton.jit
def raise_flag(flags_ptr, slot: tl.constexpr, hit):
    """Set flags[slot] when the scalar `hit` is non-zero. A plain store: every writer writes 1, so
    programs need no atomics and the common case (nothing wrong) writes nothing."""
    tl.store(flags_ptr + slot, 1, mask=hit > 0)


@triton.jit
def any_2d(bad):
    """int32 scalar: 1 when any element of a 2D boolean tile is true."""
    return tl.max(tl.max(bad.to(tl.int32), axis=1), axis=0)


@triton.jit
def grouped_program(pid, NC, H: tl.constexpr, HV: tl.constexpr, GROUP: tl.constexpr):
    """A program's (value head, chunk group, batch row, key head) when each program takes GROUP chunks,
    value heads fastest (the value heads of one key head read its tiles from L2 side by side)."""
    n_groups = tl.cdiv(NC, GROUP)
    hv = pid % HV
    group = (pid // HV) % n_groups
    b = pid // (HV * n_groups)
    return hv, group, b, hv // (HV // H)


def padded(n: int) -> int:
    """A tile width for a head size (or a block of chunks): a power of two >= n, at least 16 (the smallest
    dot operand)."""
    return max(16, 1 << (n - 1).bit_length())


def length_bucket(n_chunks: int) -> int:
    """The length class the autotuners key on (a kernel argument the kernels never read): chunk counts in powers of
    4, so {4K, 8K}, {16K, 32K}, {64K, 128K} tokens are tuned apart. Which config is fastest moves with the length
    (the one launch's chains against its outputs, kernel_bench.notes.md 2026-12-01 evening), and a process tuned
    only once, at its first length, kept that length's choice for every other (the kernel benchmark starts at 4K)."""
    return 4 ** ((max(n_chunks, 1).bit_length() + 1) // 2)


def cdiv(n: int, d: int) -> int:
    """ceil(n / d) for grid sizes on the host (triton.cdiv is a constexpr function: several times slower a
    call, and a call's host time counts at 4K tokens)."""
    return -(-n // d)


def strides(x: torch.Tensor):
    """(batch, token, head) strides of a [B, T, N, D] or [B, T, N] input whose last dimension is the
    contiguous one (see `rows_view`)."""
    return x.stride(0), x.stride(1), x.stride(2)


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """x itself when the kernels can read it in place (the innermost dimension contiguous), else a
    contiguous copy (see tile_view)."""
    return tile_view(x if x.stride(-1) == 1 else x.contiguous())


# The loaders address a tile's elements by 32-bit offsets from its first row (the row's own offset is 64-bit):
# a 64-row tile's offsets must stay under 2^31 elements.
TILE_OFFSET_LIMIT = 1 << 31


def tile_view(x: torch.Tensor) -> torch.Tensor:
    """x itself when a chunk's tile of it (CHUNK_SIZE tokens, every column of one head) is addressed within
    32-bit offsets, else a contiguous copy (whose token and column strides are small). The token dimension
    is 1; a model's views pass (transformers' v with the tokens innermost: 127 * T, up to T ~ 16M)."""
    reach = (CHUNK_SIZE - 1) * abs(x.stride(1)) + sum((n - 1) * abs(d) for n, d in zip(x.shape[3:], x.stride()[3:]))
    return x if reach < TILE_OFFSET_LIMIT else x.contiguous()


def solve_precision(dtype: torch.dtype) -> str:
    """Dot precision of the intra-chunk solve: exact float32 for float32 inputs, tf32 for 16-bit ones
    (their own rounding dominates; bf16 operands there raised the output error to 1-2e-2 on
    correlated keys). SPARSEGDN_SOLVE_PRECISION=ieee|tf32 overrides it (for GPU probes)."""
    return os.environ.get("SPARSEGDN_SOLVE_PRECISION") or ("ieee" if dtype == torch.float32 else "tf32")
