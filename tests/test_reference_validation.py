"""Bad input raises ValueError naming the argument (docs/CONTRACT.md section 5); property tests over shapes."""
import math

import numpy as np
import pytest
import torch
from gdn_inputs import random_events, random_inputs, rel_err
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsegdn
from sparsegdn import SELECTORS, SPARSE_BACKENDS, SparseConfig
from sparsegdn.recurrence import token_recurrence


def good(**overrides):
    q, k, v, g, beta, _ = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=0)
    args = dict(q=q, k=k, v=v, g=g, beta=beta)
    args.update(overrides)
    return args


def call_sparse(**kwargs):
    tensors = {name: kwargs.pop(name) for name in ("q", "k", "v", "g", "beta")}
    return sparsegdn.sparse_gated_delta_rule(*tensors.values(), backend=kwargs.pop("backend", "torch"), **kwargs)


def call_dense(**kwargs):
    tensors = {name: kwargs.pop(name) for name in ("q", "k", "v", "g", "beta")}
    return sparsegdn.dense_gated_delta_rule(*tensors.values(), backend=kwargs.pop("backend", "torch"), **kwargs)


BASE = good()
BAD_TENSORS = [
    ("q", dict(q=BASE["q"][0])),                                        # wrong rank
    ("k", dict(k=BASE["k"][:, :, :1])),                                 # shape differs from q
    ("v", dict(v=BASE["v"][:, :69])),                                   # T differs
    ("v", dict(v=torch.randn(1, 70, 3, 16))),                           # HV not a multiple of H
    ("g", dict(g=BASE["g"][..., :2])),
    ("beta", dict(beta=BASE["beta"][None])),
    ("q", dict(q=BASE["q"][:, :0], k=BASE["k"][:, :0], v=BASE["v"][:, :0], g=BASE["g"][:, :0],
               beta=BASE["beta"][:, :0])),                              # T = 0
    ("q", dict(q=BASE["q"].clone().index_put_((torch.tensor([0]),), torch.tensor(float("nan"))))),
    ("v", dict(v=BASE["v"].clone().fill_(float("inf")))),
    ("g", dict(g=BASE["g"].abs() + 0.1)),                               # positive log decay
    ("beta", dict(beta=torch.full_like(BASE["beta"], float("nan")))),
    ("k", dict(k=BASE["k"].long())),
    ("initial_state", dict(initial_state=torch.randn(1, 4, 16, 15))),
    ("initial_state", dict(initial_state=torch.full((1, 4, 16, 16), float("nan")))),
    ("scale", dict(scale=-1.0)),
]


@pytest.mark.parametrize("name,overrides", BAD_TENSORS)
@pytest.mark.parametrize("call", [call_sparse, call_dense])
def test_bad_tensors_raise_value_error_naming_the_argument(name, overrides, call):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(**good(**overrides))


@pytest.mark.parametrize("name,options", [
    ("budget", dict(budget=0.0)), ("budget", dict(budget=1.5)), ("budget", dict(budget=-0.2)),
    ("budget", dict(budget=float("nan"))), ("budget", dict(budget="half")), ("budget", dict(budget=True)),
    ("band", dict(band=4)), ("band", dict(band=-1)), ("band", dict(band=1.5)), ("band", dict(band=True)),
    ("selector", dict(selector="best")), ("backend", dict(backend="cuda")),
    ("events", dict(events=torch.ones(1, 4, 3, dtype=torch.bool))),          # NC is 2
    ("events", dict(events=torch.ones(1, 4, 2))),                             # not bool
    ("events", dict(events=[[True, False]])),
])
def test_bad_options_raise_value_error_naming_the_argument(name, options):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call_sparse(**good(), **options)


@pytest.mark.parametrize("name,options", [
    ("budget", dict(budget=1.5)), ("selector", dict(selector="best")), ("band", dict(band=4)),
    ("backend", dict(backend="cuda")), ("seed", dict(seed=-1)),
])
def test_a_config_is_checked_where_it_is_made(name, options):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        SparseConfig(**options)


def test_the_options_come_as_one_config_or_as_keywords_not_both():
    config = SparseConfig(budget=0.5, selector="uniform", band=3, backend="torch")
    o, _, info = sparsegdn.sparse_gated_delta_rule(*good().values(), config=config)
    o_keywords, _, info_keywords = call_sparse(**good(), budget=0.5, selector="uniform", band=3)
    assert torch.equal(o, o_keywords) and torch.equal(info.events, info_keywords.events)
    with pytest.raises(ValueError, match=r"^config\b.*budget"):
        sparsegdn.sparse_gated_delta_rule(*good().values(), config=config, budget=0.3)
    with pytest.raises(ValueError, match=r"^config\b"):
        sparsegdn.sparse_gated_delta_rule(*good().values(), config={"budget": 0.5})
    # a tensor or an array beside a config is a keyword given, said by name (it used to reach `!=` on a tensor)
    for budget in (torch.tensor([0.1, 0.2]), torch.tensor(0.29), np.array([0.29])):
        with pytest.raises(ValueError, match=r"^config\b.*budget"):
            sparsegdn.sparse_gated_delta_rule(*good().values(), config=config, budget=budget)


def test_the_keyword_defaults_are_the_config_defaults():
    import inspect

    defaults = inspect.signature(sparsegdn.sparse_gated_delta_rule).parameters
    assert {name: defaults[name].default for name in SparseConfig().to_dict()} == SparseConfig().to_dict()


def test_dense_rejects_unknown_backend():
    with pytest.raises(ValueError, match=r"^backend\b"):
        call_dense(**good(), backend="triton")


def test_unavailable_backends_are_value_errors_on_cpu():
    with pytest.raises(ValueError, match=r"^backend\b"):
        call_dense(**good(), backend="fla")


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 2), tokens=st.integers(1, 140), key_heads=st.integers(1, 2),
       group=st.sampled_from([1, 2, 4]), key_dim=st.sampled_from([4, 8, 16]), value_dim=st.sampled_from([4, 8, 12]),
       band=st.integers(0, 3), p=st.floats(0.0, 1.0), seed=st.integers(0, 2 ** 16))
def test_property_band3_sparse_matches_recurrence_for_any_shape(batch, tokens, key_heads, group, key_dim,
                                                                 value_dim, band, p, seed):
    value_heads = key_heads * group
    q, k, v, g, beta, s0 = random_inputs(batch, tokens, key_heads, value_heads, key_dim, value_dim,
                                         seed=seed, initial_state=True)
    events = random_events(batch, value_heads, math.ceil(tokens / 64), seed=seed, p=p)
    o, s, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=3, initial_state=s0,
                                                   output_final_state=True, backend="torch")
    o_ref, s_ref = token_recurrence(q, k, v, g, beta, events, initial_state=s0)
    assert o.shape == v.shape and s.shape == (batch, value_heads, key_dim, value_dim)
    assert rel_err(o, o_ref) <= 1e-10
    assert rel_err(s, s_ref) <= 1e-6
    # any band: the first 16 * (band + 1) tokens of the first chunk need no dropped block, so they are exact
    o_band, _, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band,
                                                     initial_state=s0, backend="torch")
    exact = min(tokens, 16 * (band + 1))
    assert rel_err(o_band[:, :exact], o_ref[:, :exact]) <= 1e-10


@settings(max_examples=40, deadline=None)
@given(budget=st.floats(1e-6, 1.0), tokens=st.integers(1, 700), value_heads=st.sampled_from([2, 4, 6]),
       selector=st.sampled_from(["score", "uniform", "random"]))
def test_property_budget_gives_exact_counts(budget, tokens, value_heads, selector):
    q, k, v, g, beta, _ = random_inputs(1, tokens, 2, value_heads, 8, 8, dtype=torch.float32, seed=tokens)
    _, _, info = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, budget=budget, selector=selector,
                                                   backend="torch")
    total = value_heads * math.ceil(tokens / 64)
    assert int(info.events.sum()) == max(1, math.ceil(budget * total - 1e-9))


NON_FINITE = [("q", float("nan")), ("k", float("inf")), ("v", float("nan")), ("v", float("-inf")),
              ("g", float("nan")), ("g", float("-inf")), ("beta", float("nan")), ("initial_state", float("inf"))]


@pytest.mark.skipif(not sparsegdn.config.triton_available(), reason="needs CUDA or TRITON_INTERPRET=1")
@pytest.mark.parametrize("name,value", NON_FINITE)
def test_triton_path_checks_after_the_kernels_and_still_names_the_argument(name, value):
    """The GPU path checks o instead of q, k, v (no sync before the launches); one bad element must still
    be caught and named."""
    q, k, v, g, beta, s0 = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=1, initial_state=True)
    tensors = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=s0)
    bad = tensors[name].clone()
    bad.view(-1)[bad.numel() // 3] = value      # one element, somewhere in the middle
    tensors[name] = bad
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        sparsegdn.sparse_gated_delta_rule(*(tensors[n] for n in ("q", "k", "v", "g", "beta")),
                                          initial_state=tensors["initial_state"], backend="triton")


@pytest.mark.skipif(not sparsegdn.config.triton_available(), reason="needs CUDA or TRITON_INTERPRET=1")
def test_triton_path_rejects_positive_log_decay():
    q, k, v, g, beta, _ = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=1)
    g = g.clone()
    g[0, 5, 1] = 0.2
    with pytest.raises(ValueError, match=r"^g\b"):
        sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, backend="triton")


# ---- fuzz: one corrupted argument, drawn at random, is always a ValueError naming that argument ----

def _corrupt_tensor(draw, name, x):
    """`x` made invalid in one way that makes `name` (and only it) wrong."""
    kinds = ["rank", "dtype", "not_tensor", "non_finite"]
    if name in ("k", "g", "beta", "initial_state"):
        kinds.append("shape")           # q's shape is the reference: changing it would blame k
    if name == "g":
        kinds.append("positive")
    kind = draw(st.sampled_from(kinds))
    if kind == "rank":
        return x[0] if draw(st.booleans()) else x[None]
    if kind == "dtype":
        return x.to(draw(st.sampled_from([torch.int64, torch.int32, torch.bool, torch.uint8])))
    if kind == "not_tensor":
        return draw(st.sampled_from([x.tolist(), x.numpy(), None if name != "initial_state" else 0.5, 3.0, "q"]))
    bad = x.clone()
    index = draw(st.integers(0, bad.numel() - 1))
    if kind == "non_finite":
        bad.view(-1)[index] = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
        return bad
    if kind == "positive":
        bad.view(-1)[index] = draw(st.floats(1e-6, 1e6))
        return bad
    dim = draw(st.integers(0, bad.ndim - 1))
    size = draw(st.integers(1, 80).filter(lambda n: n != bad.shape[dim]))
    shape = list(bad.shape)
    shape[dim] = size
    return torch.randn(*shape, dtype=bad.dtype)


@st.composite
def one_bad_tensor(draw):
    q, k, v, g, beta, s0 = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=draw(st.integers(0, 9)),
                                         initial_state=True)
    tensors = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=s0)
    name = draw(st.sampled_from(sorted(tensors)))
    if name == "v" and draw(st.booleans()):
        # v's own shape rule: (B, T) of q and HV a multiple of H (its V is free)
        tensors["v"] = torch.randn(1, 70, draw(st.sampled_from([1, 3, 5, 7])), 16)
    else:
        tensors["v" if name == "v" else name] = _corrupt_tensor(draw, name, tensors[name])
    return name, tensors


@settings(max_examples=300, deadline=None)
@given(case=one_bad_tensor(), sparse=st.booleans())
def test_fuzz_one_bad_tensor_is_named(case, sparse):
    name, tensors = case
    call = sparsegdn.sparse_gated_delta_rule if sparse else sparsegdn.dense_gated_delta_rule
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(*(tensors[n] for n in ("q", "k", "v", "g", "beta")), initial_state=tensors["initial_state"],
             backend="torch")


BAD_OPTION = {
    "budget": st.one_of(st.none(), st.floats(allow_nan=True).filter(lambda x: not 0 < x <= 1), st.booleans(),
                        st.text(max_size=5), st.just([0.5])),
    "band": st.one_of(st.none(), st.integers().filter(lambda x: not 0 <= x <= 3), st.floats(), st.booleans(),
                      st.text(max_size=3)),
    "selector": st.one_of(st.none(), st.text(max_size=12).filter(lambda s: s not in SELECTORS)),
    "scale": st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf")), st.booleans(),
                       st.text(max_size=3)),
    "backend": st.one_of(st.none(), st.text(max_size=10).filter(lambda s: s not in SPARSE_BACKENDS)),
    "seed": st.one_of(st.none(), st.integers().filter(lambda x: not 0 <= x < 2 ** 64), st.floats(), st.booleans(),
                      st.text(max_size=3)),
    "output_final_state": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
    "use_qk_l2norm_in_kernel": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(BAD_OPTION)))
def test_fuzz_one_bad_option_is_named(data, name):
    value = data.draw(BAD_OPTION[name])
    options = {"backend": "torch", name: value}
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call_sparse(**good(), **options)


# ---- issue 11, item 7: arguments that slipped through, or failed with TypeError / NotImplementedError ----

OPTIONS_ONCE_ACCEPTED = [
    ("budget", dict(budget=None)), ("band", dict(band=None)), ("selector", dict(selector=None)),
    ("backend", dict(backend=None)), ("seed", dict(seed="abc")), ("seed", dict(seed=1.5)),
    ("seed", dict(seed=2 ** 70)), ("seed", dict(seed=-1)), ("seed", dict(seed=True)),
    ("use_qk_l2norm_in_kernel", dict(use_qk_l2norm_in_kernel="no")),
    ("output_final_state", dict(output_final_state="no")), ("scale", dict(scale=1e300)),
    # a prober's cases (2026-12-03): an int past float's range (OverflowError), a scale float32 rounds to 0
    # (the outputs silently zero) or to a subnormal, a hook that cannot be called, a collector of another type
    ("scale", dict(scale=10 ** 400)), ("scale", dict(scale=1e-50)), ("scale", dict(scale=1e-39)),
    ("stage_hook", dict(stage_hook=1)), ("checks", dict(checks=1)),
]


@pytest.mark.parametrize("name,options", OPTIONS_ONCE_ACCEPTED)
def test_options_once_accepted_are_refused_by_name(name, options):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call_sparse(**good(), **{"backend": "torch", **options})
    if name in ("backend", "use_qk_l2norm_in_kernel", "output_final_state", "scale"):
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            call_dense(**good(), **{"backend": "torch", **options})


def test_the_largest_seed_and_the_smallest_are_accepted():
    for seed in (0, 2 ** 64 - 1):
        _, _, info = call_sparse(**good(), selector="random", seed=seed)
        assert int(info.events.sum()) == sparsegdn.event_count(0.29, 4, 2)


TENSOR_KINDS = {
    "float8": lambda x: x.to(torch.float8_e4m3fn),
    "sparse": lambda x: x.to_sparse(),
    "meta": lambda x: x.to("meta"),
}


@pytest.mark.parametrize("kind", sorted(TENSOR_KINDS))
@pytest.mark.parametrize("name", ["q", "k", "v", "g", "beta"])
@pytest.mark.parametrize("call", [call_sparse, call_dense])
def test_tensors_the_computation_cannot_take_are_named(kind, name, call):
    args = good()
    args[name] = TENSOR_KINDS[kind](args[name])
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(**args)


def _chunk_of_huge_decays():
    g = BASE["g"].clone()
    g[0, :64, 1] = -1e38
    return g


# Finite inputs whose computation overflowed to NaN/inf and was returned without a word.
FINITE_BUT_OVERFLOWING = [
    ("g", lambda: dict(g=_chunk_of_huge_decays())),
    ("beta", lambda: dict(beta=BASE["beta"] * 1e30)),
    ("beta", lambda: dict(beta=-BASE["beta"])),
]


@pytest.mark.parametrize("name,make", FINITE_BUT_OVERFLOWING)
@pytest.mark.parametrize("call", [call_sparse, call_dense])
def test_finite_inputs_outside_the_range_that_overflows_are_named(name, make, call):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call(**good(**make()))


def _half_inputs_whose_output_leaves_float16():
    """Each token writes v = 60000 under its own key (q = k): o = scale * v = 120000 > float16's 65504."""
    key = torch.zeros(1, 70, 2, 16, dtype=torch.float16)
    key[..., 0] = 1
    return dict(q=key, k=key, v=torch.full((1, 70, 4, 16), 6e4, dtype=torch.float16),
                g=torch.zeros(1, 70, 4), beta=torch.ones(1, 70, 4, dtype=torch.float16))


BACKENDS_ON_THIS_MACHINE = ["torch"] + (["triton"] if sparsegdn.config.triton_available() else [])


@pytest.mark.parametrize("backend", BACKENDS_ON_THIS_MACHINE)
@pytest.mark.parametrize("sparse", [True, False])
def test_an_overflow_with_finite_inputs_is_an_error_not_inf(backend, sparse):
    from sparsegdn.validation import ResultOverflowError

    if backend == "triton" and not sparse:
        pytest.skip("the dense path has no Triton backend")
    call = call_sparse if sparse else call_dense
    with pytest.raises(ResultOverflowError, match=r"^o: the result overflowed.*float16"):
        call(**_half_inputs_whose_output_leaves_float16(), scale=2.0, backend=backend)
    # the same inputs at a scale whose output fits float16 pass
    o = call(**_half_inputs_whose_output_leaves_float16(), scale=1.0, backend=backend)[0]
    assert torch.isfinite(o).all() and o.dtype == torch.float16


@pytest.mark.parametrize("name", ["q", "k", "v", "g", "beta", "initial_state"])
@pytest.mark.parametrize("call", [call_sparse, call_dense])
def test_inputs_that_require_grad_are_refused_by_name_unless_grad_mode_is_off(name, call):
    """The paths compute the forward only: a gradient would be lost (Triton) or fail deep inside (torch)."""
    args = good(initial_state=torch.zeros(1, 4, 16, 16))
    args[name] = args[name].clone().requires_grad_()
    with pytest.raises(ValueError, match=rf"^{name}: requires grad.*no_grad"):
        call(**args)
    with torch.no_grad():
        o, *_ = call(**args)
    assert o.shape == (1, 70, 4, 16) and torch.isfinite(o).all()
