"""benchmarks/overlap_check.py --summary: the rows of a batch script's runs, read back round by round (no GPU)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import overlap_check  # noqa: E402
from sparsegdn.triton import forward  # noqa: E402


def test_summary_lists_each_runs_rows_round_by_round(tmp_path):
    row = {"T": 32768, "overlapped_public_ms": 1.116, "overlapped_ms": [1.2, 1.115], "serial_ms": [1.38, 1.379],
           "bit_equal": True}
    (tmp_path / "plain-round2.json").write_text(json.dumps([row]))
    (tmp_path / "swizzled-round1.json").write_text(json.dumps([row, {**row, "T": 131072, "bit_equal": False}]))
    (tmp_path / "cases.log").write_text("not a run")
    lines = overlap_check.summary(tmp_path)
    assert [line.split()[0] for line in lines[:3]] == ["swizzled-round1", "swizzled-round1", "plain-round2"]
    assert "T= 32768 public 1.116 ms  overlapped 1.115  serial 1.379  equal True" in lines[0]
    assert lines[1].endswith("equal False") and "T=131072" in lines[1]


def test_summary_gives_each_forms_rounds_and_the_chains_beside_the_lists(tmp_path):
    """Forms named <form>-round<N>: each form's public call over its rounds (mean, fastest, slowest) by length; a
    row with the kernels' timeline also says how long the chain pass took and when the last list ended after it
    began (the overlapped call's critical path)."""
    def row(ms, kernels=None):
        return {"T": 131072, "overlapped_public_ms": ms, "overlapped_ms": [ms], "serial_ms": [ms + 1],
                "bit_equal": True, **({"overlapped_kernels": kernels} if kernels else {})}
    timeline = [["intra_chunk_kernel", 0.0, 500.0], ["state_pass_kernel", 1400.0, 2650.0],
                ["list_output_kernel", 1405.0, 2600.0], ["list_output_kernel", 2700.0, 1360.0]]
    (tmp_path / "in-loop-round1.json").write_text(json.dumps([row(4.0, timeline)]))
    (tmp_path / "in-loop-round2.json").write_text(json.dumps([row(4.2)]))
    (tmp_path / "base-round1.json").write_text(json.dumps([row(4.3)]))
    lines = overlap_check.summary(tmp_path)
    assert lines[1].startswith("in-loop-round1") and lines[1].endswith("chains 2650 us, lists end 2660 us after "
                                                                       "they begin")
    assert "chains" not in lines[0] and "chains" not in lines[2]
    table = {line.split()[0]: line.split()[1:] for line in lines[4:]}
    assert lines[3].startswith("form") and table["in-loop"] == ["131072", "4.100", "4.000", "4.200", "2"]
    assert table["base"] == ["131072", "4.300", "4.300", "4.300", "1"]


def test_whole_chain_arrangements_take_the_lists_segments_of_the_process(monkeypatch):
    """The lists run here by switch, a route that reads COMMIT_SEGMENT: a process started with SPARSEGDN_LISTS_SEGMENT
    must still walk those segments (with the default route's warm-up), or its A/B forms are one call."""
    monkeypatch.setattr(forward, "WARM_UP", 0.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 0)
    assert overlap_check.arrangement("solved", 32768) == (False, 0, 0.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", 512)
    assert overlap_check.arrangement("solved", 32768) == (False, 512, forward.LISTS_WARM_UP)
    assert overlap_check.arrangement("stored", 32768) == (True, 512, forward.LISTS_WARM_UP)
    assert overlap_check.arrangement("solved-warm-up-256", 32768) == (False, 256, 20.0)     # its own segments kept
    monkeypatch.setattr(forward, "WARM_UP", 12.0)
    assert overlap_check.arrangement("solved", 32768) == (False, 512, 12.0)
    monkeypatch.setattr(forward, "LISTS_SEGMENT", "half")       # half of each length's chunk count (64 tokens a chunk)
    assert overlap_check.arrangement("solved", 32768) == (False, 256, 12.0)
    assert overlap_check.arrangement("solved", 131072) == (False, 1024, 12.0)
    assert overlap_check.arrangement("solved", 131072 - 64) == (False, 1024, 12.0)
