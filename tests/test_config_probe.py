"""benchmarks/config_probe.py's variant table and its timing refusal (the probe itself needs a GPU)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import config_probe  # noqa: E402


def test_a_variant_set_at_import_time_is_refused_in_a_process_without_its_setting(monkeypatch, capsys):
    """Its switch is read when the kernels compile (chunk_loads.FOLD_SCALES): timing it in a process without the
    setting would time the default under its name, so the row says what is missing instead."""
    monkeypatch.delenv("SPARSEGDN_FOLD_SCALES", raising=False)
    config_probe.time_variants(["fold-scales"], [], spawn=False)
    rows = config_probe.timed_rows(capsys.readouterr().out)
    assert rows == [{"variant": "fold-scales", "error": "needs {'SPARSEGDN_FOLD_SCALES': '1'} in this process's "
                                                        "environment"}]
    assert "fold-scales" in config_probe.timed_line(rows[0])


def test_a_variant_set_at_import_time_is_timed_in_a_process_started_with_its_setting(monkeypatch, capsys):
    """One --timed call can hold variants of several settings: those this process lacks are timed after the
    others, each in a process of its own started with its setting (and told not to spawn again)."""
    import subprocess
    monkeypatch.delenv("SPARSEGDN_SKIP_ZERO_STATE", raising=False)
    calls = []

    def fake_run(command, env, **kwargs):
        calls.append((command, env.get("SPARSEGDN_SKIP_ZERO_STATE")))
        row = {"variant": command[command.index("--timed") + 1], "tokens": 4096, "entry_ms": [1.0, 1.1],
               "public_ms": [1.2, 1.2], "stage_ms": {}, "peak_extra_mb": 1.0}
        return subprocess.CompletedProcess(command, 0, stdout="noise\nTIMED " + json.dumps(row) + "\n", stderr="")
    monkeypatch.setattr(config_probe.subprocess, "run", fake_run)
    monkeypatch.setattr(config_probe, "time_variants_at", lambda names, tokens: None)
    config_probe.time_variants(["baseline", "no-zero-skip"], [4096])
    assert len(calls) == 1 and calls[0][1] == "0"
    assert calls[0][0][-3:] == ["--no-spawn", "--time", "4096"]
    rows = config_probe.timed_rows(capsys.readouterr().out)
    assert [row["variant"] for row in rows] == ["no-zero-skip"] and rows[0]["entry_ms"] == [1.0, 1.1]


@pytest.mark.parametrize("name", sorted(config_probe.VARIANTS))
def test_every_variant_names_only_known_switches_and_kernels(name):
    variant = config_probe.VARIANTS[name]
    known = set(config_probe.DESIGN_SWITCHES) | {"configs", "env", "head32", "timing_only"}
    assert set(variant) <= known, f"{name}: unknown keys {set(variant) - known}"
    for kernel, forced in variant.get("configs", {}).items():
        assert kernel in ("chunk_output", "intra_chunk", "state_pass", "state_output")
        assert len(forced) in (3, 4) and isinstance(forced[0], dict)
    json.dumps(variant)                       # plain data: printed into the probe's JSON


def test_a_spawned_variant_that_runs_too_long_or_crashes_keeps_its_rows_and_says_so(monkeypatch, capsys):
    import subprocess
    monkeypatch.delenv("SPARSEGDN_SKIP_ZERO_STATE", raising=False)
    monkeypatch.delenv("SPARSEGDN_FOLD_SCALES", raising=False)
    row = "TIMED " + json.dumps({"variant": "x", "tokens": 4096, "entry_ms": [1.0], "public_ms": [1.0],
                                 "stage_ms": {}, "peak_extra_mb": 1.0})

    def fake_run(command, env, **kwargs):
        if env.get("SPARSEGDN_FOLD_SCALES") == "1":
            raise subprocess.TimeoutExpired(command, 600, output=(row + "\n").encode())
        return subprocess.CompletedProcess(command, -11, stdout=row + "\n", stderr="Segmentation fault")
    monkeypatch.setattr(config_probe.subprocess, "run", fake_run)
    monkeypatch.setattr(config_probe, "time_variants_at", lambda names, tokens: None)
    config_probe.time_variants(["fold-scales", "no-zero-skip"], [4096])
    rows = config_probe.timed_rows(capsys.readouterr().out)
    assert [("error" in r, r.get("error", "")[:16]) for r in rows] == [
        (False, ""), (True, "its process ran "), (False, ""), (True, "its process ende")]
