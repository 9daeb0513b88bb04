"""Fresh random GDN inputs for tests (never zeros): realistic log decays and write strengths."""
import torch


def random_inputs(batch=1, tokens=100, key_heads=2, value_heads=4, key_dim=16, value_dim=16,
                  dtype=torch.float64, seed=None, initial_state=False, device="cpu"):
    gen = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(1 << 30, ())))
    q = torch.randn(batch, tokens, key_heads, key_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, tokens, key_heads, key_dim, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, tokens, value_heads, value_dim, generator=gen, dtype=torch.float64)
    rate = torch.rand(value_heads, generator=gen, dtype=torch.float64) * 0.3 + 1e-3
    g = -rate * torch.rand(batch, tokens, value_heads, generator=gen, dtype=torch.float64)
    beta = torch.rand(batch, tokens, value_heads, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    tensors = [q, k, v, g, beta]
    if initial_state:
        tensors.append(torch.randn(batch, value_heads, key_dim, value_dim, generator=gen, dtype=torch.float64))
    else:
        tensors.append(None)
    out = [t.to(device=device, dtype=dtype) if t is not None else None for t in tensors]
    out[3] = out[3].float() if dtype != torch.float64 else out[3]        # g stays float32 or float64
    if out[5] is not None and dtype != torch.float64:
        out[5] = out[5].float()
    return out


def random_events(batch, value_heads, n_chunks, seed=0, p=0.5):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(batch, value_heads, n_chunks, generator=gen) < p


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def scheduled_events(batch, value_heads, key_dim, value_dim, tokens, events, *, seed, device="cpu"):
    """float32 inputs (one key head, an initial state) through the Triton backend's pass 1 at band 1 (Tinv solved on
    chip: None) and the schedule of `events` [batch, value_heads, chunks], for tests of the passes after it: returns
    (k, v, g, beta, t_inv, s0, flags, schedule) and event_prepare's keyword options."""
    from sparsegdn.triton.chunk_loads import NUM_FLAGS
    from sparsegdn.triton.intra_chunk import intra_chunk
    from sparsegdn.triton.schedule import build_schedule
    n_chunks = events.shape[-1]
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, 1, value_heads, key_dim, value_dim, dtype=torch.float32,
                                         seed=seed, initial_state=True, device=device)
    flags = torch.zeros(NUM_FLAGS, dtype=torch.int32, device=device)
    t_inv, chunk_log_decay, _, _, _ = intra_chunk(k, v, g, beta, flags, band=1, normalize=True,
                                               num_value_heads=value_heads, num_chunks=n_chunks, store_inverse=False)
    schedule = build_schedule(events.to(device), chunk_log_decay)
    options = dict(normalize=True, num_value_heads=value_heads, num_chunks=n_chunks, band=1)
    return (k, v, g, beta, t_inv, s0, flags, schedule), options


def same_columns(a, b):
    """Two chain passes that differ only in how many value columns a program takes (the autotuned state pass against
    the publishing one of state_pass.PROGRESS_BV columns): bit for bit on a GPU, where each column's products are its
    own. The interpreter's products are numpy's matmul, whose BLAS kernels can round a column by its place in the
    block (on an AMD EPYC host: 2e-7 relative, one or two float32 ulps, where another host gave equal bits), so
    there within four ulps of the largest value."""
    if a.is_cuda:
        assert torch.equal(a, b)
    else:
        ulp = 2.0 ** -23
        torch.testing.assert_close(a, b, rtol=4 * ulp, atol=4 * ulp * b.abs().max().item())
