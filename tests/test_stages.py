"""Every backend reports the stages of sparsegdn.STAGES, by those names and in that order (contract section 5).

The stage names are an interface: the analysis records, the app's stage breakdown and the kernel
benchmark key their timings by them, so they must not depend on the backend or on the band.
"""
import pytest
import torch
from gdn_inputs import random_inputs

import sparsegdn
from sparsegdn.config import triton_available

BACKENDS = ["torch"] + (["triton"] if triton_available() else [])
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HEAD = 64 if DEVICE == "cuda" else 16        # the GPU path refuses heads under 64; the interpreter takes any


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
    assert seen == list(sparsegdn.STAGES), seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_given_events_still_report_every_stage(backend):
    q, k, v, g, beta, _ = random_inputs(1, 100, 1, 2, HEAD, HEAD, dtype=torch.float32, device=DEVICE)
    events = torch.zeros(1, 2, sparsegdn.num_chunks(100), dtype=torch.bool, device=DEVICE)
    seen = []
    sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, backend=backend, stage_hook=seen.append)
    assert seen == list(sparsegdn.STAGES), seen
