"""training/sparse_finetune.py and its differentiable core: the core computes what the public call computes
and passes gradients; a tiny fine-tune resumes exactly and records its checks (a CPU smoke run: the real
fine-tune runs on a GPU)."""
import json

import corpus_stand_in
import pytest
import torch

from analysis.patching import CoreCall, sparse_reference_core
from gdn_inputs import random_inputs, rel_err
import sparsegdn
from sparsegdn import SparseConfig
from training import sparse_finetune, train


@pytest.mark.parametrize("normalize,initial", [(True, True), (False, False)])
def test_the_training_core_computes_the_public_call_and_passes_gradients(normalize, initial):
    q, k, v, g, beta, s0 = random_inputs(2, 300, 2, 4, 16, 16, dtype=torch.float32, initial_state=initial, seed=3)
    if not normalize:                   # keys of unit norm given (unnormalised random keys make the recurrence blow up)
        q, k = (torch.nn.functional.normalize(x, dim=-1) for x in (q, k))
    config = SparseConfig(budget=0.29, selector="score", band=1, backend="torch")
    for x in (q, k, v, g, beta):
        x.requires_grad_(True)
    call = CoreCall(layer=0, q=q, k=k, v=v, g=g, beta=beta, initial_state=s0, output_final_state=True,
                    use_qk_l2norm_in_kernel=normalize, scale=None, original=None)
    o, state = sparse_reference_core(config)(call)
    expected = sparsegdn.sparse_gated_delta_rule(*(x.detach() for x in (q, k, v, g, beta)), initial_state=s0,
                                                 output_final_state=True, use_qk_l2norm_in_kernel=normalize,
                                                 config=config)
    assert rel_err(o.detach(), expected[0]) < 1e-5 and rel_err(state.detach(), expected[1]) < 1e-5
    (o.square().sum() + state.square().sum()).backward()
    for name, x in zip("q k v g beta".split(), (q, k, v, g, beta)):
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0, name
    # The budget is honoured: keeping every event computes something else.
    o_all, _ = sparse_reference_core(config.replace(budget=1.0))(call)
    assert rel_err(o.detach(), o_all.detach()) > 1e-3


@pytest.fixture
def stand_in_run(tmp_path, monkeypatch):
    """A tiny GDN-only model saved as the start checkpoint, and data/corpus/ replaced by the sample texts."""
    from transformers import Qwen3_5ForCausalLM, PreTrainedTokenizerFast

    corpus_stand_in.install(tmp_path, monkeypatch, train)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(train.TOKENIZER))
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(train.model_config(len(tokenizer), 0, tiny=True, gdn_only=True))
    model.save_pretrained(str(tmp_path / "start"))
    return tmp_path


def test_a_tiny_finetune_resumes_exactly_and_records_its_checks(stand_in_run, monkeypatch):
    runs = stand_in_run
    sparse_configs = []

    def counted(config):                # the sparse loss runs through the differentiable sparse core
        sparse_configs.append(config)
        return sparse_reference_core(config)
    monkeypatch.setattr(sparse_finetune, "sparse_reference_core", counted)
    common = ["--tiny", "--device", "cpu", "--steps", "2", "--model", str(runs / "start"), "--ppl-windows", "0",
              "--check-samples", "0", "--text-share", "0.5"]
    sparse_finetune.main(["--out", str(runs / "whole")] + common)
    sparse_finetune.main(["--out", str(runs / "first")] + common + ["--job-steps", "1"])
    split = sparse_finetune.main(["--resume", str(runs / "first"), "--out", str(runs / "second"), "--device", "cpu",
                                  "--ppl-windows", "1", "--check-samples", "1"])

    def state(name):
        folder = runs / name / "checkpoint"
        run = json.loads((folder / train.LOG).read_text())
        return run, train.load_tensors(folder, run["state_index"])

    whole, whole_state = state("whole")
    assert whole["done"] and split["done"] and split["next_step"] == 2
    second_state = state("second")[1]
    for name, tensor in whole_state.items():
        if not name.startswith("rng"):
            assert torch.equal(tensor, second_state[name]), f"{name} differs after resuming"
    strip = lambda log: [{k: v for k, v in e.items() if k != "seconds"} for e in log]
    assert strip(whole["log"]) == strip(split["log"])
    assert {"dense", "sparse"} <= set(split["log"][0])           # both losses logged
    assert len(sparse_configs) == 4     # one sparse pass a step: two steps whole, one + one resumed
    assert {(c.budget, c.selector, c.band) for c in sparse_configs} == {(0.29, "score", 1)}
    assert split["recipe"]["sparse"] == {"budget": 0.29, "selector": "score", "band": 1}
    assert split["recipe"]["text_share"] == 0.5                  # the resumed job kept the run's mixture
    assert [(s["first_step"], s["last_step"]) for s in split["stages"]] == [(0, 1), (1, 2)]
    last = split["stages"][-1]
    assert "--resume" in last["command"] and last["date"] and last["script"] == "training/sparse_finetune.py"
    phases = last["phases_s"]       # where the job's time went before and at its first step, in order
    assert list(phases) == ["model_loaded", "core_chosen", "loop_started", "first_step_done"]
    assert 0 <= phases["model_loaded"] <= phases["core_chosen"] <= phases["loop_started"] <= phases["first_step_done"]
    assert set(last["perplexity"]) == {"milton", "pydoc-howto"}
    for figures in last["perplexity"].values():
        assert figures["dense"] > 1 and figures["sparse"] > 1
        assert figures["change_percent"] == pytest.approx(100 * (figures["sparse"] / figures["dense"] - 1), abs=0.01)
    assert set(last["retrieval"]) == {"dense", "sparse"}
    assert (runs / "second" / "default-model" / "model.safetensors").is_file()
    # The weights moved: the fine-tune trained the start model.
    from safetensors.torch import load_file
    before = load_file(str(runs / "start" / "model.safetensors"))
    after = load_file(str(runs / "second" / "default-model" / "model.safetensors"))
    assert any(not torch.equal(before[name].to(after[name].dtype), after[name]) for name in after)


def test_the_text_share_rescales_the_training_mixture():
    assert sparse_finetune.mixture_with_text(0.10) is train.MIXTURE       # train.py's own, unchanged
    mixture = sparse_finetune.mixture_with_text(0.7)
    assert mixture[0] == (0.7, None, None, None)
    assert sum(entry[0] for entry in mixture) == pytest.approx(1.0)
    tasks = [entry for entry in train.MIXTURE if entry[1] is not None]
    for (share, *rest), (old_share, *old_rest) in zip(mixture[1:], tasks):
        assert rest == old_rest and share == pytest.approx(old_share * 0.3 / 0.9)


def test_bad_settings_are_refused_before_any_work(stand_in_run, capsys):
    for share in ("1", "-0.1"):
        with pytest.raises(SystemExit):
            sparse_finetune.parse_args(["--text-share", share])
        assert f"--text-share {float(share)}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sparse_finetune.parse_args(["--sparse-weight", "1.5"])
    assert "--sparse-weight 1.5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sparse_finetune.parse_args(["--budget", "0"])
    for flag in ("--lr", "--steps", "--length"):                 # 0 is refused, not read as "the default"
        with pytest.raises(SystemExit):
            sparse_finetune.parse_args([flag, "0"])
        assert f"{flag} 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sparse_finetune.parse_args(["--resume", str(stand_in_run), "--steps", "3"])


def test_a_sparse_only_finetune_makes_no_dense_pass_and_checks_no_dense_core(stand_in_run, monkeypatch):
    """At --sparse-weight 1 the dense pass's weight is 0: no dense loss is logged and FLA's gradient check (which
    compiles kernels on a GPU) is not run; the log says why."""
    runs = stand_in_run

    def no_check(*args, **kwargs):
        raise AssertionError("choose_core called for a job without a dense pass")
    monkeypatch.setattr(train, "choose_core", no_check)
    run = sparse_finetune.main(["--tiny", "--device", "cpu", "--steps", "1", "--model", str(runs / "start"),
                                "--ppl-windows", "0", "--check-samples", "0", "--sparse-weight", "1.0",
                                "--out", str(runs / "sparse-only")])
    stage = run["stages"][-1]
    assert stage["fla_gradient_check"] == {"skipped": "sparse weight 1: the steps make no dense pass"}
    assert stage["dense_core"] == "none (sparse weight 1)"
    assert "dense" not in run["log"][0] and "sparse" in run["log"][0]
    # the committed logs name no machine's folders: a start inside the repository is recorded relative to it
    assert train.repo_relative(train.ROOT / "data" / "default-model") == "data/default-model"
    assert run["recipe"]["start_model"] == str(runs / "start")         # outside it, as given
