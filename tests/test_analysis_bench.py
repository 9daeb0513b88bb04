"""The prefill benchmark script runs end to end at a tiny shape on the CPU (the GPU run is the lead's)."""
from __future__ import annotations

import json

import sparsegdn
from analysis import bench_prefill


def test_tiny_prefill_benchmark_writes_results(tmp_path):
    code = bench_prefill.main(["--tiny", "--tokens", "130", "--warmup", "1", "--repeats", "1", "--out", str(tmp_path)])
    assert code == 0
    results = json.loads((tmp_path / "prefill_tiny.json").read_text())
    rows = {row["core"]: row for row in results["runs"]}
    assert set(rows) == {"dense-torch", "sparse-torch@0.29", "zero"}
    for row in rows.values():
        assert row["error"] is None and row["finite"] and row["prefill_ms_median"] > 0
        assert row["core_calls"] == 3                       # one per GDN layer
    assert rows["dense-torch"]["prefill_vs_dense"] == 1.0
    assert rows["zero"]["core_ms_median"] < rows["dense-torch"]["core_ms_median"]
    assert "| 130 | sparse-torch@0.29 |" in (tmp_path / "prefill_tiny.md").read_text()
    stages = rows["sparse-torch@0.29"]["stage_ms_median"]          # the sparse core's stages, one run
    assert list(stages) == list(sparsegdn.STAGES) and all(ms > 0 for ms in stages.values())
    # from the separate hooked prefill, inside its own core calls (the timed ones carry no hook)
    assert sum(stages.values()) <= rows["sparse-torch@0.29"]["staged_core_ms_median"] + 1e-3
    assert "stage_ms_median" not in rows["dense-torch"] and "stage_ms_median" not in rows["zero"]
    text = (tmp_path / "prefill_tiny.md").read_text()
    assert "Stages of `sparse-torch@0.29` at 130 tokens" in text and "1 separate prefill(s) with the stage hook" in text


def test_the_timed_sparse_core_carries_no_stage_hook(monkeypatch, tmp_path):
    """The sparse core's timed prefills call it without a stage hook (a hooked call takes no launch plan on a GPU);
    only the separate staged prefills pass one."""
    hooks = []
    real = sparsegdn.sparse_gated_delta_rule

    def noting(*args, stage_hook=None, **kwargs):
        hooks.append(stage_hook is not None)
        return real(*args, stage_hook=stage_hook, **kwargs)
    monkeypatch.setattr(sparsegdn, "sparse_gated_delta_rule", noting)
    code = bench_prefill.main(["--tiny", "--tokens", "130", "--warmup", "1", "--repeats", "2", "--out", str(tmp_path)])
    assert code == 0
    # 3 GDN layers a prefill: 1 warm-up and 2 timed prefills without the hook, then 2 staged prefills with it
    assert hooks == [False] * 9 + [True] * 6, hooks


def test_segmented_prefill_benchmark_routes_every_segment(tmp_path):
    code = bench_prefill.main(["--tiny", "--tokens", "200", "--segment-tokens", "64", "--warmup", "1",
                               "--repeats", "1", "--out", str(tmp_path), "--name", "segmented"])
    assert code == 0
    rows = json.loads((tmp_path / "segmented.json").read_text())["runs"]
    # 4 segments (64, 64, 64, 8 tokens) x 3 GDN layers.
    assert all(row["core_calls"] == 12 and row["finite"] for row in rows)


def test_prefill_records_which_kernels_fla_ran(monkeypatch):
    """FLA 0.6 hands chunk_gated_delta_rule to FlashQLA where FlashQLA is installed unless FLA_FLASH_QLA=0: the prefill
    record says which (the same transformers core read 64 ms with FlashQLA installed and 92 ms without)."""
    import importlib.util

    from analysis import bench_prefill
    real_find_spec = importlib.util.find_spec
    installed = {"flash_qla": True}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if installed.get(name) else real_find_spec(name, *a))
    monkeypatch.delenv("FLA_FLASH_QLA", raising=False)
    monkeypatch.setattr(bench_prefill.torch.cuda, "is_available", lambda: False)
    assert bench_prefill.fla_backend() == "native"           # no GPU: FLA's own (CPU or interpreter) path
    monkeypatch.setattr(bench_prefill.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_prefill.torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert bench_prefill.fla_backend() == "native"           # an A100: FlashQLA serves Hopper and newer only
    monkeypatch.setattr(bench_prefill.torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert bench_prefill.fla_backend() == "flash_qla"
    monkeypatch.setenv("FLA_FLASH_QLA", "0")
    assert bench_prefill.fla_backend() == "native"
    monkeypatch.delenv("FLA_FLASH_QLA")
    installed["flash_qla"] = False
    assert bench_prefill.fla_backend() == "native"
