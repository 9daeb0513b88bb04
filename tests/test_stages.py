"""Every backend reports the stages of sparsegdn.STAGES, by those names (contract section 5).

The stage names are an interface: the analysis records, the app's stage breakdown and the kernel
benchmark key their timings by them, so they must not depend on the backend or on the band. The
Triton backend runs each stage once, in the order of STAGES; the torch backend selects first, then
runs the other four stages once per slab of chunks (sparsegdn.event_forward), so its names repeat and
a stage's time is the sum of its spans.
"""
import pytest
import torch
from gdn_inputs import random_inputs

import sparsegdn
from sparsegdn import event_forward
from sparsegdn.config import triton_available

BACKENDS = ["torch"] + (["triton"] if triton_available() else [])
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HEAD = 64 if DEVICE == "cuda" else 16        # the GPU path refuses heads under 64; the interpreter takes any
PER_SLAB = ["intra_solve", "event_prepare", "state_pass", "output"]


def expected_stages(backend: str, n_slabs: int = 1) -> list[str]:
    return list(sparsegdn.STAGES) if backend == "triton" else ["selection"] + PER_SLAB * n_slabs


def test_the_stages_are_the_documented_five():
    assert sparsegdn.STAGES == ("intra_solve", "selection", "event_prepare", "state_pass", "output")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("band", sparsegdn.BANDS)
@pytest.mark.parametrize("selector", ["score", "random"])
def test_every_backend_reports_the_stages_in_order(backend, band, selector):
    q, k, v, g, beta, _ = random_inputs(1, 100, 1, 2, HEAD, HEAD, dtype=torch.float32, device=DEVICE)
    seen = []
    sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, band=band, selector=selector, backend=backend,
                                      stage_hook=seen.append)
    assert seen == expected_stages(backend), seen
    assert set(seen) == set(sparsegdn.STAGES)


@pytest.mark.parametrize("chunks_per_slab", [1, 2])
def test_the_torch_backend_reports_the_four_stages_once_per_slab(monkeypatch, chunks_per_slab):
    """Five chunks in slabs of one or two chunks: selection once, then the four per-slab stages five
    or three times, in order (event_forward sizes a slab by SLAB_VALUES / (64 (K+V) B HV))."""
    monkeypatch.setattr(event_forward, "SLAB_VALUES", chunks_per_slab * 64 * 2 * HEAD * 2)
    q, k, v, g, beta, _ = random_inputs(1, 300, 1, 2, HEAD, HEAD, dtype=torch.float32)
    seen = []
    sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="torch", stage_hook=seen.append)
    assert seen == expected_stages("torch", n_slabs=-(-5 // chunks_per_slab)), seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_given_events_still_report_every_stage(backend):
    q, k, v, g, beta, _ = random_inputs(1, 100, 1, 2, HEAD, HEAD, dtype=torch.float32, device=DEVICE)
    events = torch.zeros(1, 2, sparsegdn.num_chunks(100), dtype=torch.bool, device=DEVICE)
    seen = []
    sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, backend=backend, stage_hook=seen.append)
    assert seen == expected_stages(backend), seen
