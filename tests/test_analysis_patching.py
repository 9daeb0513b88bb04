"""The GDN core swap: exactness at full budget, both transformers patch points, restore on error."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from analysis.patching import (ENTRY_POINTS, dense_core, gdn_modules, layout_of, original_core, sparse_core,
                               swap_gdn_core)
from test_analysis_support import random_ids, tiny_loaded

from sparsegdn import SparseConfig


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded()


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def modeling_module(model):
    return sys.modules[type(gdn_modules(model)[0]).__module__]


def test_installed_transformers_uses_the_module_level_patch_point(loaded):
    assert {layout_of(m) for m in gdn_modules(loaded.model)} == {"module"}


@pytest.mark.parametrize("n_tokens", [200, 321])
def test_full_budget_band3_reproduces_unpatched_logits(loaded, n_tokens):
    ids = random_ids(n_tokens, seed=n_tokens)
    reference = logits(loaded.model, ids)
    with swap_gdn_core(loaded.model, sparse_core(SparseConfig(budget=1.0, selector="score", band=3, backend="torch"))):
        patched = logits(loaded.model, ids)
    error = (patched - reference).abs().max().item()
    assert error <= 1e-4, f"max abs logit diff {error:.3g}"


def test_small_budget_changes_logits(loaded):
    """The swap is live: skipping events must move the logits (else the tests above prove nothing)."""
    ids = random_ids(400, seed=1)
    reference = logits(loaded.model, ids)
    with swap_gdn_core(loaded.model, sparse_core(SparseConfig(budget=0.1, selector="uniform", band=1, backend="torch"))):
        patched = logits(loaded.model, ids)
    assert (patched - reference).abs().max().item() > 1e-3


def test_every_gdn_layer_is_routed_through_the_core(loaded):
    seen = []

    def spy(call):
        seen.append((call.layer, tuple(call.q.shape), tuple(call.v.shape)))
        return original_core(call)

    with swap_gdn_core(loaded.model, spy):
        logits(loaded.model, random_ids(70))
    assert [layer for layer, _, _ in seen] == loaded.gdn_layers
    # q arrives de-duplicated to the H = 2 key heads, v keeps HV = 4 value heads.
    assert all(q[2] == 2 and v[2] == 4 for _, q, v in seen)


def test_restored_after_an_exception(loaded):
    module = modeling_module(loaded.model)
    originals = {name: getattr(module, name) for _, name in ENTRY_POINTS}
    reference = logits(loaded.model, random_ids(100))

    def broken(call):
        raise RuntimeError("core failed")

    with pytest.raises(RuntimeError, match="core failed"):
        with swap_gdn_core(loaded.model, broken):
            logits(loaded.model, random_ids(100))
    assert {name: getattr(module, name) for _, name in ENTRY_POINTS} == originals
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in gdn_modules(loaded.model))
    assert torch.equal(logits(loaded.model, random_ids(100)), reference)


def simulate_instance_layout(model):
    """The transformers <= 5.14 layout: the core is an instance attribute that forward calls.

    The installed forward calls module globals, so each global is pointed (for the duration of the
    forward) at the instance attribute: patching the attribute is then what changes the result.
    """
    module = modeling_module(model)
    for gdn in gdn_modules(model):
        for attribute, name in ENTRY_POINTS:
            setattr(gdn, attribute, getattr(module, name))

        def legacy_forward(self, *args, **kwargs):
            saved = {name: getattr(module, name) for _, name in ENTRY_POINTS}
            try:
                for attribute, name in ENTRY_POINTS:
                    setattr(module, name, getattr(self, attribute))
                return type(self).forward(self, *args, **kwargs)
            finally:
                for name, function in saved.items():
                    setattr(module, name, function)

        gdn.forward = types.MethodType(legacy_forward, gdn)


def test_instance_layout_patch_point_and_restore():
    loaded = tiny_loaded(seed=3)
    simulate_instance_layout(loaded.model)
    assert {layout_of(m) for m in gdn_modules(loaded.model)} == {"instance"}
    module = modeling_module(loaded.model)
    globals_before = {name: getattr(module, name) for _, name in ENTRY_POINTS}
    attributes_before = [{a: vars(m)[a] for a, _ in ENTRY_POINTS} for m in gdn_modules(loaded.model)]
    ids = random_ids(300, seed=5)
    reference = logits(loaded.model, ids)

    calls = []

    def counting(call):
        calls.append(call.layer)
        return sparse_core(SparseConfig(budget=1.0, band=3, backend="torch"))(call)

    with swap_gdn_core(loaded.model, counting):
        exact = logits(loaded.model, ids)
        # This layout is patched on the instances: no dispatcher hooks are installed.
        assert all(not m._forward_pre_hooks for m in gdn_modules(loaded.model))
    assert calls == loaded.gdn_layers
    assert (exact - reference).abs().max().item() <= 1e-4
    with swap_gdn_core(loaded.model, sparse_core(SparseConfig(budget=0.1, selector="uniform", backend="torch"))):
        sparse = logits(loaded.model, ids)
    assert (sparse - reference).abs().max().item() > 1e-3

    with pytest.raises(ValueError):
        with swap_gdn_core(loaded.model, lambda call: (_ for _ in ()).throw(ValueError("boom"))):
            logits(loaded.model, ids)
    assert {name: getattr(module, name) for _, name in ENTRY_POINTS} == globals_before
    assert [{a: vars(m)[a] for a, _ in ENTRY_POINTS} for m in gdn_modules(loaded.model)] == attributes_before
    assert torch.equal(logits(loaded.model, ids), reference)


def test_another_model_keeps_its_core_while_one_is_patched(loaded):
    other = tiny_loaded(seed=7)
    ids = random_ids(150)
    reference = logits(other.model, ids)
    with swap_gdn_core(loaded.model, sparse_core(SparseConfig(budget=0.1, selector="uniform", backend="torch"))):
        assert torch.equal(logits(other.model, ids), reference)


def test_segmented_prefill_with_cache_matches_one_shot(loaded):
    """The carried recurrent state and KV cache make a 3-segment prefill equal to one pass."""
    from transformers import DynamicCache

    ids = random_ids(64 * 5 + 1, seed=11)   # the last segment has a single token
    model = loaded.model
    with torch.no_grad(), swap_gdn_core(model, dense_core("torch")):
        whole = model.model(input_ids=ids).last_hidden_state
        cache = DynamicCache(config=model.config)
        parts = [model.model(input_ids=ids[:, a:b], past_key_values=cache, use_cache=True).last_hidden_state
                 for a, b in ((0, 128), (128, 320), (320, 321))]
    error = (torch.cat(parts, 1) - whole).abs().max().item()
    assert error <= 1e-4, f"segmented vs one-shot hidden states differ by {error:.3g}"


def test_moe_text_stack_is_patched_too():
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    config = Qwen3_5MoeTextConfig(
        vocab_size=256, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32)
    torch.manual_seed(0)
    model = Qwen3_5MoeForCausalLM(config).eval()
    assert len(gdn_modules(model)) == 3
    ids = random_ids(200, seed=2)
    reference = logits(model, ids)
    with swap_gdn_core(model, sparse_core(SparseConfig(budget=1.0, band=3, backend="torch"))):
        exact = logits(model, ids)
    assert (exact - reference).abs().max().item() <= 1e-4
    assert torch.equal(logits(model, ids), reference)


def test_the_ablation_core_removes_every_gdn_layer_output(loaded):
    """analysis/layer_ablation.py's zero core: the model runs, the GDN output is gone (the logits move as far
    as every GDN layer's removal moves them), and a final state is returned when the layer asks for one."""
    from analysis.layer_ablation import zero_core

    ids = random_ids(200, seed=3)
    reference = logits(loaded.model, ids)
    outputs = []

    def spy(call):
        o, state = zero_core(call)
        outputs.append((o, state, call))
        return o, state

    with swap_gdn_core(loaded.model, spy):
        ablated = logits(loaded.model, ids)
    assert outputs and all(o.abs().max() == 0 and o.shape == call.v.shape for o, _, call in outputs)
    assert all((state is not None) == call.output_final_state for _, state, call in outputs)
    assert (ablated - reference).abs().max().item() > 1e-3


def test_the_ablation_report_reads_both_outcomes():
    """layer_ablation.reading: a look-up that survives almost no events does not need the state carried
    across chunks (the hybrid default); one that falls with them does (the GDN-only default)."""
    from analysis.layer_ablation import SETTINGS, reading

    dense, starved, zeroed = SETTINGS

    def rows(kept):
        return [(dense, 4096, {"niah_single": 1.0}), (starved, 4096, {"niah_single": kept}),
                (zeroed, 4096, {"niah_single": 0.0})]

    assert "does not pass through the GDN state" in reading(rows(1.0))[0]
    assert "passes through the GDN state carried across chunks, which is what the selectors" in reading(rows(0.0))[0]
    assert "part of the look-up" in reading(rows(0.75))[0]
