"""state_pass.CHAIN_MAXNREG, the publishing chain programs' register cap (off by default; the GPU matrix's
test_gpu_register_capped_chains_match_torch runs it on a GPU): the setting, and when the launch takes it."""
from types import SimpleNamespace

import pytest
import torch
from fresh_process import run_fresh

from sparsegdn.triton import forward, state_pass


def imported(setting):
    """sparsegdn.triton.state_pass imported in a fresh process with SPARSEGDN_CHAIN_MAXNREG=setting (read at import)."""
    return run_fresh("from sparsegdn.triton import state_pass; print(state_pass.CHAIN_MAXNREG)",
                     CHAIN_MAXNREG=setting)


def test_the_setting_is_a_multiple_of_eight_or_none_and_anything_else_is_refused_at_import():
    done = imported("168")
    assert done.returncode == 0 and done.stdout.split() == ["168"], done.stderr
    for bad in ("100", "abc", "512"):
        refused = imported(bad)
        assert refused.returncode != 0 and "SPARSEGDN_CHAIN_MAXNREG" in refused.stderr, (bad, refused.stderr[-300:])


def test_the_cap_applies_on_a_gpu_to_16_bit_lists_only(monkeypatch):
    monkeypatch.setattr(state_pass, "INTERPRET", SimpleNamespace(value=False))
    monkeypatch.setattr(state_pass, "CHAIN_MAXNREG", 0)
    assert state_pass.chain_register_cap(torch.bfloat16) == {}
    monkeypatch.setattr(state_pass, "CHAIN_MAXNREG", 168)
    assert state_pass.chain_register_cap(torch.bfloat16) == {"maxnreg": 168}
    assert state_pass.chain_register_cap(torch.float16) == {"maxnreg": 168}
    assert state_pass.chain_register_cap(torch.float32) == {}
    monkeypatch.setattr(state_pass, "INTERPRET", SimpleNamespace(value=True))
    assert state_pass.chain_register_cap(torch.bfloat16) == {}


@pytest.mark.parametrize("cap", [0, 168])
def test_the_cap_is_a_design_switch(cap, monkeypatch):
    """Plans and CUDA graphs are keyed by forward.design_switches: a call under another cap is not replayed."""
    monkeypatch.setattr(state_pass, "CHAIN_MAXNREG", 0)
    plain = forward.design_switches()
    monkeypatch.setattr(state_pass, "CHAIN_MAXNREG", cap)
    assert (forward.design_switches() == plain) == (cap == 0)
