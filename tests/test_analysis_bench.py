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
    assert sum(stages.values()) <= rows["sparse-torch@0.29"]["core_ms_median"] + 1e-3   # inside its core calls
    assert "stage_ms_median" not in rows["dense-torch"] and "stage_ms_median" not in rows["zero"]
    assert "Stages of `sparse-torch@0.29` at 130 tokens" in (tmp_path / "prefill_tiny.md").read_text()


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
