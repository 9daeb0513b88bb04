"""benchmarks/overlap_check.py --summary: the rows of a batch script's runs, read back round by round (no GPU)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import overlap_check  # noqa: E402


def test_summary_lists_each_runs_rows_round_by_round(tmp_path):
    row = {"T": 32768, "overlapped_public_ms": 1.116, "overlapped_ms": [1.2, 1.115], "serial_ms": [1.38, 1.379],
           "bit_equal": True}
    (tmp_path / "plain-round2.json").write_text(json.dumps([row]))
    (tmp_path / "swizzled-round1.json").write_text(json.dumps([row, {**row, "T": 131072, "bit_equal": False}]))
    (tmp_path / "cases.log").write_text("not a run")
    lines = overlap_check.summary(tmp_path)
    assert [line.split()[0] for line in lines] == ["swizzled-round1", "swizzled-round1", "plain-round2"]
    assert "T= 32768 public 1.116 ms  overlapped 1.115  serial 1.379  equal True" in lines[0]
    assert lines[1].endswith("equal False") and "T=131072" in lines[1]
