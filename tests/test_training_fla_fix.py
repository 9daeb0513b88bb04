"""The torch stand-in for FLA's gated chunk_bwd_dqkwg equals autograd of the chunk it differentiates.

Per chunk, with chunk-local cumulative log2 decays g, the state h entering the chunk and v the
corrected values (FLA's v_new), FLA's forward computes
    o      = scale * [(q * 2^g) h + causal(q k^T * 2^(g_i - g_j)) v]
    h_next = 2^g_last h + (k * 2^(g_last - g))^T v
    v_new  = u - w h
and the backward returns the gradients of <do, o> + <dh, h_next> + <dv, v_new> in q, k, w and g,
with g's gradient taken per unit of natural log (so without autograd's factor ln 2).
"""

import math
from types import SimpleNamespace

import pytest
import torch

from training import fla_hopper_fix, train
from training.fla_hopper_fix import chunk_bwd_dqkwg_torch

C = 64


def chunk_forward(q, k, v, w, g, h, scale):
    """q, k [B,T,H,K] -> o, h_next, -w h for every chunk; shapes as FLA lays them out."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    NT = T // C
    group = HV // H
    qc = q.repeat_interleave(group, 2).reshape(B, NT, C, HV, K).permute(0, 3, 1, 2, 4)
    kc = k.repeat_interleave(group, 2).reshape(B, NT, C, HV, K).permute(0, 3, 1, 2, 4)
    vc = v.reshape(B, NT, C, HV, V).permute(0, 3, 1, 2, 4)
    wc = w.reshape(B, NT, C, HV, K).permute(0, 3, 1, 2, 4)
    gc = g.reshape(B, NT, C, HV).permute(0, 3, 1, 2)
    hs = h.reshape(B, NT, HV, K, V).permute(0, 2, 1, 3, 4)
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    decay = torch.where(causal, torch.exp2((gc[..., :, None] - gc[..., None, :]).masked_fill(~causal, 0)), 0.0)
    o = scale * ((qc * torch.exp2(gc)[..., None]) @ hs + ((qc @ kc.transpose(-1, -2)) * decay) @ vc)
    g_last = gc[..., -1:]
    h_next = torch.exp2(g_last)[..., None] * hs + (kc * torch.exp2(g_last - gc)[..., None]).transpose(-1, -2) @ vc
    return o, h_next, -(wc @ hs)


@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("heads", [(2, 2), (2, 4)])
def test_matches_autograd_of_the_chunk(state_v_first, heads):
    torch.manual_seed(0)
    H, HV = heads
    B, T, K, V, scale = 2, 2 * C, 32, 16, 0.2
    q, k = torch.randn(B, T, H, K, dtype=torch.float64), torch.randn(B, T, H, K, dtype=torch.float64)
    v, w = torch.randn(B, T, HV, V, dtype=torch.float64), torch.randn(B, T, HV, K, dtype=torch.float64)
    g = -torch.rand(B, T // C, C, HV, dtype=torch.float64).cumsum(2).reshape(B, T, HV)
    h = torch.randn(B * (T // C), HV, K, V, dtype=torch.float64)
    do, dv = torch.randn(B, T, HV, V, dtype=torch.float64), torch.randn(B, T, HV, V, dtype=torch.float64)
    dh = torch.randn(B * (T // C), HV, K, V, dtype=torch.float64)

    leaves = [x.clone().requires_grad_() for x in (q, k, w, g)]
    o, h_next, minus_wh = chunk_forward(leaves[0], leaves[1], v, leaves[2], leaves[3], h, scale)
    as_chunks = lambda x: x.reshape(B, T // C, C, HV, -1).permute(0, 3, 1, 2, 4)
    loss = (o * as_chunks(do)).sum() + (minus_wh * as_chunks(dv)).sum() \
        + (h_next * dh.reshape(B, T // C, HV, K, V).permute(0, 2, 1, 3, 4)).sum()
    want_dq, want_dk, want_dw, want_dg = torch.autograd.grad(loss, leaves)

    layout = (lambda x: x.transpose(-1, -2).contiguous()) if state_v_first else (lambda x: x)
    dq, dk, dw, dg = chunk_bwd_dqkwg_torch(q, k, v, do, layout(h), layout(dh), w=w, g=g, dv=dv, scale=scale,
                                           state_v_first=state_v_first)
    for name, got, want in (("dq", dq, want_dq), ("dk", dk, want_dk), ("dw", dw, want_dw),
                            ("dg", dg * math.log(2), want_dg)):
        error = ((got.double() - want).norm() / want.norm()).item()
        assert error < 1e-5, f"{name}: relative error {error:.2e}"
        # FLA's code after this kernel indexes its results as row-major (l2norm_bwd views dq as [-1, K])
        assert got.is_contiguous(), f"{name}: strides {got.stride()}"


def test_refuses_what_it_does_not_implement():
    q = torch.randn(1, 100, 1, 32)
    v = torch.randn(1, 100, 1, 32)
    h = torch.randn(2, 1, 32, 32)
    with pytest.raises(NotImplementedError):
        chunk_bwd_dqkwg_torch(q, q, v, v, h, h, g=torch.zeros(1, 100, 1), scale=1.0)


GDN_HEADS = SimpleNamespace(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
                            linear_value_head_dim=128)


def test_a_failing_gradient_check_trains_on_torch_and_keeps_its_traceback(monkeypatch, capsys):
    def failing_kernel():
        raise RuntimeError("view size is not compatible")

    monkeypatch.setattr(fla_hopper_fix, "install", lambda: True)
    monkeypatch.setattr(fla_hopper_fix, "gradient_error", lambda *args, **kwargs: failing_kernel())
    core, check = train.choose_core("auto", "cuda", GDN_HEADS)
    assert core == "torch"
    printed = capsys.readouterr().out
    for inputs in ("bfloat16", "float32"):      # bf16 failing, float32 is tried before giving FLA up
        failure = check[f"failed_{inputs}_inputs"]
        assert failure["error"] == "RuntimeError('view size is not compatible')"
        assert "in failing_kernel" in failure["traceback"] and "Traceback" in failure["traceback"]
        assert failure["traceback"] in printed        # the job's log has it too
    assert check["decided_by"] == "float32 inputs (failed)"


@pytest.mark.parametrize("errors, core, inputs", [
    ({"bfloat16": 1e-3}, "fla", "bfloat16"),                       # bf16 agrees: no float32 check
    ({"bfloat16": 0.05, "float32": 1e-3}, "fla", "float32"),       # bf16's rounding only: float32 decides
    ({"bfloat16": 0.5, "float32": 0.5}, "torch", "float32"),       # a wrong backward
])
def test_the_gradient_check_picks_fla_only_when_the_gradients_agree(monkeypatch, errors, core, inputs):
    asked = []

    def error(*args, dtype):
        asked.append(str(dtype).removeprefix("torch."))
        return errors[asked[-1]]
    monkeypatch.setattr(fla_hopper_fix, "install", lambda: True)
    monkeypatch.setattr(fla_hopper_fix, "gradient_error", error)
    assert train.choose_core("auto", "cuda", GDN_HEADS) == (core, {
        "tolerance": train.GRADIENT_TOLERANCE, "max_relative_gradient_error": errors[inputs], "inputs": inputs,
        **{f"error_{name}_inputs": value for name, value in errors.items()}, "decided_by": f"{inputs} inputs"})
    assert asked == list(errors)


def test_no_gradient_check_off_the_gpu():
    assert train.choose_core("auto", "cpu", GDN_HEADS) == ("torch", {"skipped": "device cpu"})


def test_a_bf16_check_that_fails_leaves_the_float32_check_to_decide(monkeypatch):
    def error(*args, dtype):
        if dtype == torch.bfloat16:
            raise RuntimeError("no bf16 kernel")
        return 1e-3
    monkeypatch.setattr(fla_hopper_fix, "install", lambda: True)
    monkeypatch.setattr(fla_hopper_fix, "gradient_error", error)
    core, check = train.choose_core("auto", "cuda", GDN_HEADS)
    assert core == "fla" and check["inputs"] == "float32" and check["max_relative_gradient_error"] == 1e-3
    assert check["decided_by"] == "float32 inputs"
    assert check["failed_bfloat16_inputs"]["error"] == "RuntimeError('no bf16 kernel')"
