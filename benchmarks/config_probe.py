"""Which kernel configs compute the right thing on this GPU: each variant in its own process.

    python benchmarks/config_probe.py [--out DIR]

A variant forces configs of some kernels (or an environment setting) and runs a few shapes in 16-bit
inputs, both designs of the GPU path, against the torch backend with the same events. A variant that
faults the GPU (illegal address) only ends its own process. Prints one JSON line per variant and a
table; the kernels' CONFIGS keep only what passes here.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [  # (B, T, H, HV, K, V, band, dtype)
    (1, 1000, 3, 3, 128, 128, 2, "bfloat16"), (2, 777, 2, 8, 128, 128, 1, "bfloat16"),
    (1, 500, 2, 4, 64, 64, 3, "float16"), (1, 600, 2, 4, 64, 256, 1, "bfloat16"),
]
# Head size 32, refused on a GPU since it computed wrongly (sparsegdn.api.MIN_GPU_HEAD_SIZE): the variants
# with "head32" lift the refusal and run these too, to see whether a config change cures it.
HEAD32_CASES = [(1, 333, 2, 4, 32, 32, 1, "bfloat16"), (1, 300, 2, 4, 32, 128, 1, "bfloat16")]
VARIANTS = {
    "baseline": {}, "no-autotune": {"env": {"SPARSEGDN_AUTOTUNE": "0"}},
    "head32": {"head32": True},
    # One pipeline stage cured an out-of-bounds shared-memory read in segment_maps_kernel's product
    # (compute-sanitizer, H200, 2026-11-30); the configs that faulted before may share that cause.
    "state-bv16-1stage": {"configs": {"state_pass": ({"BV": 16}, 4, 1)}},
    "state-bv32-1stage": {"configs": {"state_pass": ({"BV": 32}, 4, 1)}},
    "state-bv32-8warps-1stage": {"configs": {"state_pass": ({"BV": 32}, 8, 1)}},
    "state-bv64-1stage": {"configs": {"state_pass": ({"BV": 64}, 4, 1)}},
    "output-8warps-1stage": {"configs": {"chunk_output": ({"GROUP": 1, "BV": 128}, 8, 1)}},
    "output-group4-1stage": {"configs": {"chunk_output": ({"GROUP": 4, "BV": 128}, 4, 1)}},
    "intra-8warps-1stage": {"configs": {"intra_chunk": ({}, 8, 1)}},
    "affine": {"env": {"SPARSEGDN_AFFINE_COMMIT": "1"}},
    "affine-8warps-1stage": {"env": {"SPARSEGDN_AFFINE_COMMIT": "1"}, "configs": {"state_pass": ({"BV": 32}, 8, 1)}},
    "head32-1stage": {"head32": True, "configs": {"state_pass": ({"BV": 32}, 4, 1),
                                                  "chunk_output": ({"GROUP": 1, "BV": 128}, 4, 1)}},
}


def run_variant(name):
    """In this process: force the variant's config, run every case in both designs, print JSON."""
    import torch
    import triton
    sys.path.insert(0, str(ROOT / "tests"))
    from gdn_inputs import random_events, random_inputs, rel_err

    import sparsegdn
    from sparsegdn.triton import chunk_output, forward, intra_chunk, state_pass
    from sparsegdn import api
    variant = VARIANTS[name]
    kernels = {"chunk_output": chunk_output.chunk_output_kernel, "intra_chunk": intra_chunk.intra_chunk_kernel,
               "state_pass": state_pass.state_pass_kernel}
    for kernel_name, (kwargs, warps, stages) in variant.get("configs", {}).items():
        kernels[kernel_name].configs = [triton.Config(kwargs, num_warps=warps, num_stages=stages)]
    cases = CASES
    if variant.get("head32"):
        api.MIN_GPU_HEAD_SIZE = 16
        cases = CASES + HEAD32_CASES
    results = []
    for batch, tokens, heads, value_heads, key_dim, value_dim, band, dtype in cases:
        q, k, v, g, beta, s0 = random_inputs(batch, tokens, heads, value_heads, key_dim, value_dim,
                                             dtype=getattr(torch, dtype), initial_state=True, device="cuda", seed=7)
        events = random_events(batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens, p=0.35).cuda()
        ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, initial_state=s0,
                                                output_final_state=True, backend="torch")
        for store in (True, False):
            forward.STORE_INVERSE = store
            case = f"B{batch}-T{tokens}-H{heads}-HV{value_heads}-K{key_dim}-V{value_dim}-band{band}-{dtype}-" + (
                "stored" if store else "on_chip")
            try:
                o, s, _ = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band,
                                                            initial_state=s0, output_final_state=True,
                                                            backend="triton")
                torch.cuda.synchronize()
                results.append({"case": case, "o_err": rel_err(o, ref[0]), "s_err": rel_err(s, ref[1])})
            except Exception as error:  # noqa: BLE001 - reported, then this process ends if the context is gone
                results.append({"case": case, "error": f"{type(error).__name__}: {str(error)[:160]}"})
                if "CUDA" in str(error) or "illegal" in str(error):
                    break
    print("RESULT " + json.dumps({"variant": name, "results": results}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return run_variant(args.one)

    def launch(name):
        env = dict(os.environ, **VARIANTS[name].get("env", {}))
        done = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True,
                              timeout=400, cwd=ROOT)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if lines:
            return json.loads(lines[-1][len("RESULT "):])
        return {"variant": name, "crashed": done.returncode, "stderr": done.stderr[-600:]}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        reports = list(pool.map(launch, VARIANTS))
    for report in reports:
        print(json.dumps(report))
    for report in reports:
        if "crashed" in report:
            print(f"{report['variant']:20s} process ended with {report['crashed']}: {report['stderr'][-200:]!r}")
            continue
        bad = [r for r in report["results"] if "error" in r or r["o_err"] > 2e-2 or r["s_err"] > 2e-2]
        worst = max((r.get("o_err", 0.0) for r in report["results"]), default=0.0)
        print(f"{report['variant']:20s} {'OK ' if not bad else 'BAD'} worst o err {worst:.2e}  "
              + "; ".join(f"{r['case']}: {r.get('error') or format(r['o_err'], '.2e')}" for r in bad)[:600])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "config_probe.json").write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
