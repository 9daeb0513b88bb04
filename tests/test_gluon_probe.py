"""benchmarks/gluon_probe.py's Triton twins on a CPU machine (the interpreter): the persistent own-output kernels
against torch, and the list twin of the output pass bit for bit against the product's chunk_output. Its Gluon
kernels need a GPU (their outputs are checked there against these twins and torch)."""
import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gluon_probe.py"


def test_triton_twins_match_torch_and_the_product(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--interpret-check", "--out", str(out)],
                          env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    twins, output_pass = rows[:-1], rows[-1]
    assert {(row["loads"], row["stages"]) for row in twins} >= {("pointers", 2), ("descriptors", 2)}
    for row in twins:                   # bf16 outputs against float32 torch with the same roundings of P and M
        assert 0 < row["worst_rel_vs_torch"] < 4e-3, row
    assert output_pass["zero_state_chunks"] > 0 and output_pass["chunks_with_state"] > 0
    assert output_pass["rel_vs_product"] == 0.0
