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
    config_probe.time_variants(["fold-scales"], [])
    rows = config_probe.timed_rows(capsys.readouterr().out)
    assert rows == [{"variant": "fold-scales", "error": "needs {'SPARSEGDN_FOLD_SCALES': '1'} in this process's "
                                                        "environment"}]
    assert "fold-scales" in config_probe.timed_line(rows[0])


@pytest.mark.parametrize("name", sorted(config_probe.VARIANTS))
def test_every_variant_names_only_known_switches_and_kernels(name):
    variant = config_probe.VARIANTS[name]
    known = set(config_probe.DESIGN_SWITCHES) | {"configs", "env", "head32", "timing_only"}
    assert set(variant) <= known, f"{name}: unknown keys {set(variant) - known}"
    for kernel, forced in variant.get("configs", {}).items():
        assert kernel in ("chunk_output", "intra_chunk", "state_pass", "state_output")
        assert len(forced) in (3, 4) and isinstance(forced[0], dict)
    json.dumps(variant)                       # plain data: printed into the probe's JSON
