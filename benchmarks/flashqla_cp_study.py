"""How much of FlashQLA's speed comes from its context parallelism, and what that parallelism costs in accuracy
(a study, not a test; issue 14's design question).

    FLA_FLASH_QLA=0 python benchmarks/flashqla_cp_study.py --out $OUT [--tokens 8192 ... 131072]

FlashQLA 0.1.3 splits one long sequence into segments run side by side (auto_cp=True, batch 1) and joins
them by the gate's decay: a segment's entering state is recomputed from zero over the chunks before it
until their summed log decay drops below -10; older history is dropped (an approximation). With
auto_cp=False it walks every chunk in order (exact). On kernel_bench.py's inputs (B=1, H=16, HV=32,
K=V=128, bf16, head pairs from fast to slow decay) this script times both, interleaved (median of
do_bench rounds), beside FLA native and our dense semantics (the public call, budget 1, band 3, `all`),
and measures each one's error against the float32 torch core (sparsegdn.dense_gated_delta_rule,
backend="torch", inputs in float32): relative Frobenius error of the outputs and of the final state, and
the largest absolute output error. Writes flashqla_cp_study.json to --out (after every length); the README's table
and the app's Measured results page render it (analysis/measurements.py, cp_study_table).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("FLA_FLASH_QLA", "0")

import torch                                   # noqa: E402
import triton                                  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import sparsegdn                               # noqa: E402
from kernel_bench import K, make_inputs, sources_digest   # noqa: E402

ROUNDS = 3


def contenders(inputs):
    q, k, v, g, beta = inputs
    scale = K ** -0.5
    runs = {}
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
    runs["fla"] = lambda: fla_gdn(q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True,
                                  output_final_state=True)
    import flash_qla
    for cp in (True, False):
        runs[f"flashqla_cp_{'on' if cp else 'off'}"] = lambda cp=cp: flash_qla.chunk_gated_delta_rule(
            q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True, output_final_state=True, auto_cp=cp)
    dense = sparsegdn.SparseConfig(budget=1.0, band=3, selector="all", backend="triton")
    runs["sparsegdn_dense_semantics"] = lambda: sparsegdn.sparse_gated_delta_rule(
        q, k, v, g, beta, scale=scale, output_final_state=True, config=dense)[:2]
    return runs


def errors(result, reference):
    o, state = result[0], result[1]
    o_ref, state_ref = reference
    o = o.float()
    return {"output_rel_err": ((o - o_ref).norm() / o_ref.norm()).item(),
            "output_max_abs_err": (o - o_ref).abs().max().item(),
            "state_rel_err": ((state.float() - state_ref).norm() / state_ref.norm()).item()}


def study(tokens):
    inputs = make_inputs(tokens)
    q, k, v, g, beta = inputs
    reference = sparsegdn.dense_gated_delta_rule(q.float(), k.float(), v.float(), g, beta.float(),
                                                 scale=K ** -0.5, output_final_state=True, backend="torch")
    runs = contenders(inputs)
    rows = {name: errors(fn(), reference) for name, fn in runs.items()}
    del reference
    times = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, fn in runs.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100))
    for name in runs:
        rows[name].update(ms=statistics.median(times[name]), ms_runs=times[name])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 32768, 131072])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "sources": sources_digest(),
              "command": "FLA_FLASH_QLA=0 python benchmarks/flashqla_cp_study.py "
                         + " ".join("$OUT" if a == str(args.out) else a for a in sys.argv[1:]),
              "rows": {}}
    for tokens in args.tokens:
        record["rows"][tokens] = study(tokens)
        for name, row in record["rows"][tokens].items():
            print(f"T={tokens:6d} {name:26s} {row['ms']:7.3f} ms  o rel {row['output_rel_err']:.2e}  "
                  f"o max {row['output_max_abs_err']:.2e}  state rel {row['state_rel_err']:.2e}", flush=True)
        (args.out / "flashqla_cp_study.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
