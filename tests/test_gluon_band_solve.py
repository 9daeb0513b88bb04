"""gluon_band_solve (the Gluon lists' band-1 solve, Hopper only) against band_solve's Triton solve on the same A:
the same tf32 products in the same order, so the same Tinv bit for bit once rounded to bf16 as both output passes
round it. Needs an sm_90 GPU (Gluon does not run under the interpreter); the GPU matrix's list cases check the whole
output pass built on it."""
import pytest
import torch
import triton
import triton.language as tl

from sparsegdn.triton import band_solve
from sparsegdn.triton.gluon_band_solve import GLUON_PROBLEM

if GLUON_PROBLEM is None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    from sparsegdn.triton.gluon_band_solve import band_inverse_batched, band_zero_blocks

    @gluon.jit
    def _gluon_solve_kernel(a_ptr, t_ptr, T_LAYOUT: gl.constexpr, BAND: gl.constexpr, num_warps: gl.constexpr):
        rows: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
        i = gl.arange(0, 64, layout=gl.SliceLayout(1, rows))
        j = gl.arange(0, 64, layout=gl.SliceLayout(0, rows))
        offsets = i[:, None] * 64 + j[None, :]
        scratch = gl.allocate_shared_memory(gl.float32, [64, 64], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        t_smem = gl.allocate_shared_memory(gl.bfloat16, [64, 64], T_LAYOUT)
        band_zero_blocks(t_smem, BAND, num_warps)
        band_inverse_batched(gl.load(a_ptr + offsets), scratch, t_smem, BAND, num_warps)
        gl.thread_barrier()
        gl.store(t_ptr + offsets, t_smem.load(rows))


@triton.jit
def _triton_solve_kernel(a_ptr, t_ptr, BAND: tl.constexpr, PRECISION: tl.constexpr):
    rows = tl.arange(0, 64)
    offsets = rows[:, None] * 64 + rows[None, :]
    tl.store(t_ptr + offsets, band_solve.band_inverse_of(tl.load(a_ptr + offsets), BAND, PRECISION).to(tl.bfloat16))


def chunk_matrix(seed):
    """A = strict_lower(beta_i k_i . k_j exp(gamma_i - gamma_j)) for one chunk of unit-norm keys, as pass 1 forms it
    (float32 [64, 64])."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.nn.functional.normalize(torch.randn(64, 128, device="cuda", generator=generator), dim=-1)
    beta = torch.rand(64, device="cuda", generator=generator)
    gamma = torch.cumsum(torch.nn.functional.logsigmoid(torch.randn(64, device="cuda", generator=generator) + 3), 0)
    decay = torch.exp(torch.clamp(gamma[:, None] - gamma[None, :], max=0.0))
    return torch.tril(beta[:, None] * (k @ k.T) * decay, diagonal=-1).contiguous()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0)
                    or GLUON_PROBLEM is not None, reason="Gluon's band solve needs an sm_90 device")
@pytest.mark.parametrize("band", [0, 1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gluon_band_solve_equals_band_solve(band, seed):
    a = chunk_matrix(seed)
    expected = torch.full((64, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    solved = torch.full_like(expected, float("nan"))
    _triton_solve_kernel[(1,)](a, expected, BAND=band, PRECISION="tf32")
    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)
    _gluon_solve_kernel[(1,)](a, solved, layout, band, num_warps=4)
    blocks = torch.arange(64, device="cuda") // 16
    distance = blocks[:, None] - blocks[None, :]
    assert torch.isfinite(expected).all() and (expected[(distance < 0) | (distance > band)] == 0).all()
    difference = (solved.float() - expected.float()).abs().max().item()
    assert torch.equal(solved, expected), f"largest difference {difference:.3e}"


def test_the_swizzle_setting_is_read_at_import_and_anything_else_refused():
    """SPARSEGDN_SOLVE_SWIZZLE (on by default): the scratch's views swizzled or plain; both keep the arithmetic, so
    the GPU case above holds either way (batch 37's swizzle.sh runs the cases swizzled and times one against the
    other)."""
    from fresh_process import run_fresh

    from sparsegdn.triton import gluon_band_solve
    code = "from sparsegdn.triton import gluon_band_solve as g; print(g.SOLVE_SWIZZLE)"
    assert run_fresh(code).stdout.split() == ["True"]
    assert run_fresh(code, SOLVE_SWIZZLE="0").stdout.split() == ["False"]
    refused = run_fresh(code, SOLVE_SWIZZLE="yes")
    assert refused.returncode != 0 and "SPARSEGDN_SOLVE_SWIZZLE" in refused.stderr, refused.stderr[-300:]
    for bad in ("", "2", "true", " 1"):
        with pytest.raises(ValueError, match="SPARSEGDN_SOLVE_SWIZZLE"):
            gluon_band_solve._swizzle_setting(bad)


@pytest.mark.skipif(GLUON_PROBLEM is not None, reason="Gluon unavailable")
def test_the_scratch_views_agree_where_they_alias():
    """The slots are written through the flat [256, 16] view and read through four_slots' [4, 16, 16] one (and back):
    both must map (slot, row, column) to the same bytes, so their swizzles must be the same and repeat within a slot's
    16 rows. The square's 16-row, 16-column blocks are sliced: its swizzle's period and vector must divide 16."""
    from sparsegdn.triton import gluon_band_solve as solve
    flat, slots, square = (getattr(solve, name).value for name in ("FLAT", "SLOTS", "SQUARE"))
    assert (flat.vec, flat.per_phase, flat.max_phase) == (slots.vec, slots.per_phase, slots.max_phase)
    assert list(flat.order) == [1, 0] and list(slots.order) == [2, 1, 0] and list(square.order) == [1, 0]
    for layout in (flat, slots, square):
        assert 16 % (layout.per_phase * layout.max_phase) == 0 and 16 % layout.vec == 0
