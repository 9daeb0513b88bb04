"""The public call's remembered checks (api.CHECKED_KEYS): a call whose key passed the checks skips them, and
nothing a check reads can change without changing the key. On the CPU the keys are off unless a test turns them on
(api.CHECKED_DEVICE_TYPES), as here."""
import pytest
import torch
from gdn_inputs import random_inputs

from sparsegdn import SparseConfig, api, validation
from sparsegdn.triton import call_plans, forward

import test_reference_validation as cases


@pytest.fixture
def keyed(monkeypatch):
    """Keys on for CPU inputs, starting from none remembered."""
    monkeypatch.setattr(api, "CHECKED_DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(api, "_checked", {})
    return api._checked


def test_a_call_whose_key_passed_skips_the_checks_and_computes_the_same(keyed, monkeypatch):
    args = cases.good()
    o, state, info = cases.call_sparse(**args, output_final_state=True)
    assert len(keyed) == 1
    ((config, scale),) = keyed.values()
    assert config.backend == "torch" and scale == 16 ** -0.5

    def refused(*_):
        raise AssertionError("checked again")
    monkeypatch.setattr(validation, "check_inputs", refused)
    again, state_again, info_again = cases.call_sparse(**cases.good(), output_final_state=True)   # fresh tensors
    assert torch.equal(o, again) and torch.equal(state, state_again) and torch.equal(info.events, info_again.events)
    with pytest.raises(AssertionError, match="checked again"):     # another option's value: another key
        cases.call_sparse(**cases.good(), output_final_state=True, budget=0.5)


def test_the_keys_are_off_by_default_on_the_cpu_and_when_switched_off(monkeypatch):
    monkeypatch.setattr(api, "_checked", {})
    cases.call_sparse(**cases.good())
    assert api._checked == {}
    monkeypatch.setattr(api, "CHECKED_DEVICE_TYPES", ("cpu",))
    monkeypatch.setattr(api, "CHECKED_KEYS", False)
    cases.call_sparse(**cases.good())
    assert api._checked == {}


@pytest.mark.parametrize("name,overrides", cases.BAD_TENSORS)
def test_bad_tensors_are_named_after_a_good_call_was_remembered(keyed, name, overrides):
    cases.call_sparse(**cases.good())
    cases.call_sparse(**cases.good(initial_state=torch.zeros(1, 4, 16, 16)))
    assert len(keyed) == 2
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        cases.call_sparse(**cases.good(**overrides))


@pytest.mark.parametrize("name,options", [
    ("output_final_state", dict(output_final_state=1)),          # equal to True, but not a bool
    ("use_qk_l2norm_in_kernel", dict(use_qk_l2norm_in_kernel=1.0)),
    ("scale", dict(scale=True)), ("scale", dict(scale=0)), ("band", dict(band=1.0)), ("band", dict(band=True)),
    ("budget", dict(budget=1.5)), ("selector", dict(selector="best")), ("seed", dict(seed=-1)),
    ("stage_hook", dict(stage_hook=3)), ("checks", dict(checks=[])),
    ("config", dict(config=SparseConfig(backend="torch"), budget=0.5)),
])
def test_bad_options_are_named_after_a_good_call_was_remembered(keyed, name, options):
    cases.call_sparse(**cases.good(), output_final_state=True, use_qk_l2norm_in_kernel=True, scale=1.0,
                      budget=1.0, band=1)
    assert len(keyed) == 1
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        cases.call_sparse(**cases.good(), **{"output_final_state": True, "use_qk_l2norm_in_kernel": True,
                                             "scale": 1.0, "budget": 1.0, "band": 1, **options})


def test_gradients_and_grad_mode_are_in_the_key(keyed):
    with torch.no_grad():
        cases.call_sparse(**cases.good(q=cases.good()["q"].clone().requires_grad_()))
    assert len(keyed) == 1
    with pytest.raises(ValueError, match=r"^q: requires grad"):       # the same tensors, grad mode on
        cases.call_sparse(**cases.good(q=cases.good()["q"].clone().requires_grad_()))
    cases.call_sparse(**cases.good())                               # grad mode on, no input requires grad
    assert len(keyed) == 2
    with pytest.raises(ValueError, match=r"^beta: requires grad"):    # the same shapes, beta requires grad
        cases.call_sparse(**cases.good(beta=cases.good()["beta"].clone().requires_grad_()))


@pytest.mark.parametrize("name", ["k", "v", "g", "beta"])
def test_another_device_under_the_same_shapes_is_named(keyed, name):
    cases.call_sparse(**cases.good())
    with pytest.raises(ValueError, match=rf"^{name}: on the meta device"):
        cases.call_sparse(**cases.good(**{name: cases.good()[name].to("meta")}))


@pytest.mark.parametrize("make", [lambda k: k.as_subclass(Wrapped), lambda k: k.to_sparse()],
                         ids=["subclass", "sparse"])
def test_a_key_tensor_of_another_kind_is_checked_in_full(keyed, make):
    args = cases.good()
    assert api.checked_key((args["q"], make(args["k"]), args["v"], args["g"], args["beta"], None), None, ()) is None


class Wrapped(torch.Tensor):
    pass


def test_values_are_still_checked_under_a_remembered_key(keyed):
    cases.call_sparse(**cases.good())
    bad = cases.good()
    bad["v"] = bad["v"].clone()
    bad["v"][0, 5, 1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"^v\b"):
        cases.call_sparse(**bad)


def test_inputs_of_other_kinds_are_checked_in_full(keyed):
    args = cases.good()
    key = api.checked_key((args["q"].as_subclass(Wrapped), args["k"], args["v"], args["g"], args["beta"], None), None,
                          (None, None, False, True))
    assert key is None
    assert api.checked_key(tuple(args.values()) + (None,), None, (None, torch.tensor(1.0))) is None
    assert api.checked_key(tuple(args.values()) + (None,), None, (None, 1.0)) is not None
    q, k, v, g, beta, _ = random_inputs(1, 70, 2, 4, dtype=torch.float32, seed=0)
    assert api.checked_key((q.to("meta"), k, v, g, beta, None), None, ()) is None    # not a checked device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the keys' default device: needs a CUDA device")
def test_gpu_remembered_checks_compute_the_same_and_still_refuse_bad_inputs(monkeypatch):
    """On a GPU, by default: a call found under its key (checks skipped, its plan found by the same key) returns what
    a call checked in full returns, bit for bit, and bad inputs after it are still named."""
    monkeypatch.setattr(api, "_checked", {})

    def inputs():
        q, k, v, g, beta, _ = random_inputs(1, 300, 2, 4, 128, 128, dtype=torch.bfloat16, seed=5, device="cuda")
        return dict(q=q, k=k, v=v, g=g, beta=beta)

    def call(**args):
        return cases.call_sparse(**{**inputs(), **args}, backend="triton", output_final_state=True)
    monkeypatch.setattr(api, "CHECKED_KEYS", False)
    o_full, s_full, _ = call()
    assert api._checked == {}
    monkeypatch.setattr(api, "CHECKED_KEYS", True)
    replays = call_plans.replays
    for _ in range(4):              # remembered, then found (the plan recorded, then replayed)
        o, s, _ = call()
        assert torch.equal(o, o_full) and torch.equal(s, s_full)
    assert len(api._checked) == 1
    (key,) = api._checked
    assert ("caller", key, forward.design_switches()) in call_plans._plans and call_plans.replays > replays
    bad_v = inputs()["v"].clone()
    bad_v[0, 150, 1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"^v\b"):
        call(v=bad_v)
    with pytest.raises(ValueError, match=r"^g\b"):
        call(g=inputs()["g"].abs() + 0.1)
    with pytest.raises(ValueError, match=r"^q: requires grad"):
        call(q=inputs()["q"].clone().requires_grad_())
    with pytest.raises(ValueError, match=r"^output_final_state\b"):
        cases.call_sparse(**inputs(), backend="triton", output_final_state=1)
