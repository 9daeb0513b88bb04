"""A torch stand-in for FLA's gated `chunk_bwd_dqkwg`, so FLA's fast GDN can train on Hopper.

FLA 0.6.0 refuses its gated backward kernel `chunk_bwd_dqkwg` on Hopper with Triton 3.4-3.7.0
(the compiler miscompiles it: FLA issue #640), and the lent H200 has Triton 3.6. That kernel has
no recurrence: per chunk it is a handful of small matmuls given the chunk states h and their
gradients dh (both computed by FLA's other, unaffected kernels). So it is recomputed here in
torch, vectorised over all chunks, and FLA's forward and the rest of its backward stay in Triton.

tests/test_training_fla_fix.py checks this against FLA's own kernel under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch


def chunk_bwd_dqkwg_torch(q, k, v, do, h, dh, w=None, g=None, g_gamma=None, dv=None, scale=None,
                          state_v_first=False, cu_seqlens=None, chunk_size=64, chunk_indices=None):
    """Same arguments and results as `fla.ops.common.chunk_o.chunk_bwd_dqkwg` (gated, fixed length).

    Shapes: q, k [B,T,H,K]; v, do, dv [B,T,HV,V]; w [B,T,HV,K]; g [B,T,HV] (chunk-local cumulative
    log2 decay, as FLA passes it); h, dh [B*NT,HV,K,V] (or [..,V,K] with state_v_first).
    Returns dq, dk [B,T,H,K] (q's dtype), dw (w's dtype, or None), dg [B,T,HV] float32, all contiguous
    as FLA's kernel allocates them: the FLA code that takes them over indexes them as row-major
    [B,T,...] (prepare_wy_repr_bwd's dw and chunk_local_cumsum's dg in Triton, l2norm_bwd's
    `dy.view(-1, K)` on dq and dk). The chunked layout [B,HV,NT,C,D] reshapes to [B,T,HV,D] as a
    head-major view without a copy, which the view refuses ("view size is not compatible with input
    tensor's size and stride") and the Triton kernels would read wrongly: hence `.contiguous()`.
    """
    if cu_seqlens is not None or g_gamma is not None or g is None:
        raise NotImplementedError("only the gated, fixed-length case is replaced")
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    C = chunk_size
    if T % C:
        raise NotImplementedError(f"sequence length {T} must be a multiple of the chunk size {C}")
    NT = T // C
    f32 = torch.float32

    def chunks(x):  # [B,T,HV,D] -> [B,HV,NT,C,D]
        return x.to(f32).reshape(B, NT, C, HV, -1).permute(0, 3, 1, 2, 4)

    group = HV // H
    qc = chunks(q.repeat_interleave(group, dim=2))
    kc = chunks(k.repeat_interleave(group, dim=2))
    vc, doc = chunks(v), chunks(do)
    gc = g.to(f32).reshape(B, NT, C, HV).permute(0, 3, 1, 2)             # [B,HV,NT,C]
    hs = h.to(f32).reshape(B, NT, HV, *h.shape[-2:]).permute(0, 2, 1, 3, 4)
    dhs = dh.to(f32).reshape(B, NT, HV, *dh.shape[-2:]).permute(0, 2, 1, 3, 4)
    if state_v_first:  # stored [V, K]: bring to [K, V]
        hs, dhs = hs.transpose(-1, -2), dhs.transpose(-1, -2)

    g_last = gc[..., -1:]                                                  # [B,HV,NT,1]
    # the state's own decay across the chunk: d loss / d g_last through h
    dg_last = (hs * dhs).sum((-1, -2)) * torch.exp2(g_last[..., 0])        # [B,HV,NT]
    dq = (doc @ hs.transpose(-1, -2)) * torch.exp2(gc)[..., None] * scale  # reads of the state
    dk = (vc @ dhs.transpose(-1, -2)) * torch.exp2(g_last - gc)[..., None]  # writes to the state
    dg_last = dg_last + (dk * kc).sum((-1, -2))

    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    ds = (doc @ vc.transpose(-1, -2))
    ds = torch.where(causal, ds * torch.exp2((gc[..., :, None] - gc[..., None, :]).masked_fill(~causal, 0.0)), 0.0)
    ds = ds * scale
    dq = dq + ds @ kc
    dk = dk + ds.transpose(-1, -2) @ qc
    dg = (dq * qc).sum(-1) - (dk * kc).sum(-1)                             # [B,HV,NT,C]
    dg[..., -1] += dg_last

    def unchunk(x):  # [B,HV,NT,C,D] -> [B,T,HV,D], row-major
        return x.permute(0, 2, 3, 1, 4).reshape(B, T, HV, -1).contiguous()

    dq, dk = unchunk(dq), unchunk(dk)
    if group > 1:
        dq = dq.view(B, T, H, group, K).sum(3)
        dk = dk.view(B, T, H, group, K).sum(3)
    dw = None
    if w is not None:
        dw = -unchunk(chunks(dv) @ hs.transpose(-1, -2)).to(w.dtype)
    dg = dg.permute(0, 2, 3, 1).reshape(B, T, HV).contiguous()
    return dq.to(q.dtype), dk.to(k.dtype), dw, dg


def install() -> bool:
    """Route FLA's gated delta rule backward through the torch stand-in; False when FLA is absent."""
    try:
        from fla.ops.gated_delta_rule import chunk as fla_chunk
    except ImportError:
        return False
    fla_chunk.chunk_bwd_dqkwg = chunk_bwd_dqkwg_torch
    return True


def gradient_error(device: str = "cuda", key_heads: int = 2, value_heads: int = 4, key_dim: int = 128,
                   value_dim: int = 128, seed: int = 0, dtype: torch.dtype = torch.float32) -> float:
    """Largest relative error of FLA's (patched) gradients against transformers' torch reference core,
    at the model's head counts and sizes.

    Run on the training device before training: a wrong backward would train a wrong model silently.
    With dtype bfloat16, FLA gets q, k, v and beta in bf16 and g in float32, as the Qwen3.5 layer hands them
    to it under the training's autocast (so the kernels this check compiles are the ones the first step
    needs), and the reference computes in float32 on the same rounded values.
    """
    import inspect

    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from transformers.models.qwen3_5 import modeling_qwen3_5

    reference = inspect.unwrap(modeling_qwen3_5.torch_chunk_gated_delta_rule)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    B, T, H, HV, K, V = 2, 256, key_heads, value_heads, key_dim, value_dim

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(device)

    # q and k with H heads, repeated to HV as transformers' Qwen3.5 layer hands them to the core
    q, k = (draw(B, T, H, K).repeat_interleave(HV // H, dim=2) for _ in range(2))
    v = draw(B, T, HV, V)
    g = -torch.nn.functional.softplus(draw(B, T, HV))
    beta = torch.sigmoid(draw(B, T, HV))
    weight = draw(B, T, HV, V)
    if dtype != torch.float32:     # the model's rounding of the core's inputs; g stays float32 (its A_log path)
        q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    grads = []
    for core, cast in ((chunk_gated_delta_rule, lambda x: x), (reference, lambda x: x.float())):
        leaves = [cast(x).clone().requires_grad_() for x in (q, k, v, g, beta)]
        o, _ = core(*leaves[:3], g=leaves[3], beta=leaves[4], use_qk_l2norm_in_kernel=True)
        grads.append(torch.autograd.grad((o.float() * weight).sum(), leaves))
    return max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in zip(*grads))
