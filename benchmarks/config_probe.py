"""Which kernel configs compute the right thing on this GPU: each variant in its own process.

    python benchmarks/config_probe.py [--out DIR] [--only VARIANT ...] [--time TOKENS ...]

A variant forces configs of some kernels (or a design, or an environment setting) and runs a few shapes
in 16-bit inputs, both designs of the GPU path, against the torch backend with the same events. A variant
that faults the GPU (illegal address) only ends its own process. Prints one JSON line per variant and a
table; the kernels' CONFIGS keep only what passes here. With --time, the variants that passed are then
timed one after another in one process at those lengths on the benchmark's inputs (backend entry and
stage times, budget 0.29): which config is fastest, before it goes into a kernel's list.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))       # this checkout's sparsegdn, whatever else is on the path
CASES = [  # (B, T, H, HV, K, V, band, dtype, initial state)
    (1, 1000, 3, 3, 128, 128, 2, "bfloat16", True), (2, 777, 2, 8, 128, 128, 1, "bfloat16", True),
    (1, 500, 2, 4, 64, 64, 3, "float16", True), (1, 600, 2, 4, 64, 256, 1, "bfloat16", True),
    (2, 900, 2, 8, 128, 128, 1, "bfloat16", False),   # zero states before the first commits (chunk_output)
]
# Head size 32, refused on a GPU since it computed wrongly (sparsegdn.api.MIN_GPU_HEAD_SIZE): the variants
# with "head32" lift the refusal and run these too, to see whether a config change cures it.
HEAD32_CASES = [(1, 333, 2, 4, 32, 32, 1, "bfloat16", True), (1, 300, 2, 4, 32, 128, 1, "bfloat16", True)]
# A variant: "configs" forces one config per kernel (kwargs, warps, stages[, most registers a thread: maxnreg]);
# "env" an environment setting (its own process only); "head32" adds the head-size-32 cases.
IMPORTED = "imported"        # a variant's value for a switch: the one imported (the library's default)
VARIANTS = {
    "baseline": {}, "no-autotune": {"env": {"SPARSEGDN_AUTOTUNE": "0"}},
    # The library's default as it is: long calls whose selection keeps at most half of the events take the Gluon
    # lists beside the chain pass (forward.LISTS_FROM); "baseline" and every other variant run the one launch. Only
    # --time reaches the lists: the check's cases are short and given events, so its rows repeat baseline's.
    "default-lists": {"lists_from": IMPORTED},
    "head32": {"head32": True},
    # The state pass's commit loop is a for loop since 2026-11-30 (pipelined loads, no spills at K = 128 in
    # benchmarks/compile_report.py); the configs that faulted with the while loop are tried again.
    "state-bv8": {"configs": {"state_pass": ({"BV": 8}, 4, 3)}},
    "state-bv16": {"configs": {"state_pass": ({"BV": 16}, 4, 3)}},
    "state-bv32": {"configs": {"state_pass": ({"BV": 32}, 4, 3)}},
    "state-bv32-2stages": {"configs": {"state_pass": ({"BV": 32}, 4, 2)}},
    "state-bv32-8warps": {"configs": {"state_pass": ({"BV": 32}, 8, 3)}},
    "state-bv64": {"configs": {"state_pass": ({"BV": 64}, 4, 3)}},
    "state-bv64-8warps": {"configs": {"state_pass": ({"BV": 64}, 8, 3)}},
    # The output pass: 255 registers in every config; (1, 128, 4 warps) spills a little, GROUP > 1 a lot.
    "output-bv64": {"configs": {"chunk_output": ({"GROUP": 1, "BV": 64}, 4, 2)}},
    "output-bv32": {"configs": {"chunk_output": ({"GROUP": 1, "BV": 32}, 4, 2)}},
    "output-8warps": {"configs": {"chunk_output": ({"GROUP": 1, "BV": 128}, 8, 2)}},
    "output-group4": {"configs": {"chunk_output": ({"GROUP": 4, "BV": 128}, 4, 3)}},
    "output-group2-bv64": {"configs": {"chunk_output": ({"GROUP": 2, "BV": 64}, 4, 3)}},
    "intra-8warps-1stage": {"configs": {"intra_chunk": ({}, 8, 1)}},
    "head32-8warps": {"head32": True, "configs": {"chunk_output": ({"GROUP": 1, "BV": 128}, 8, 2),
                                                  "state_pass": ({"BV": 32}, 8, 3)}},
    # Passes 4 and 5: one launch whose output programs wait for their snapshots (state_output.py, the
    # default since 2026-12-01), or the two launches before it ("separate"); outputs chunk by chunk (the
    # default) or in order of readiness ("overlap-ready-order", measured slower on 2026-12-01).
    "separate": {"overlap": False},
    "overlap-bv16": {"configs": {"state_output": ({"STATE_BV": 16, "BV": 128}, 4, 3)}},
    "overlap-bv16-2stages": {"configs": {"state_output": ({"STATE_BV": 16, "BV": 128}, 4, 2)}},
    "overlap-bv32": {"configs": {"state_output": ({"STATE_BV": 32, "BV": 128}, 4, 3)}},
    "overlap-ready-order": {"ready": True},
    "relaxed-poll": {"relaxed_poll": True},      # output programs poll with plain loads, acquire once
    # Tinv stored by pass 1 and read back, forced for every band (forward.STORE_INVERSE; the default since 2026-12-02
    # chooses by band: on chip for band 1, which the timing runs, stored for bands 2 and 3). The checks run both
    # designs in every variant; the timing runs the variant's.
    "stored": {"store": True},
    "stored-separate": {"store": True, "overlap": False},
    "paired": {"paired": True},
    "paired-separate": {"paired": True, "overlap": False},
    # The chain cut into segments of 64 commits walked side by side in the one launch (or in two launches), the
    # segment maps in float32 or as a scaled identity plus a difference in the input dtype (segment_maps.DELTA_MAPS).
    "segmented": {"segment": 64},
    "segmented-delta": {"segment": 64, "delta_maps": True},
    "segmented-delta-separate": {"segment": 64, "delta_maps": True, "overlap": False},
    # Timing only (its outputs are garbage by construction, so it is never checked): the one launch with output
    # programs that return at once, i.e. the chains alone in the launch's shape. Against `baseline`, how much of
    # the one launch's time beyond its chains is the outputs' contention and waiting.
    "chain-only": {"chain_only": True, "timing_only": True},
    # The chain walk cut into segments of 256 commits run side by side (exact K x K maps, segment_scan.py), with
    # the outputs and without them (2026-12-03: once the outputs get cheaper, the walk is what is left of the
    # launch: chain-only read 2.79 of the launch's 3.36 ms at 128K).
    "segmented-256": {"segment": 256},
    "chain-only-segmented-256": {"chain_only": True, "timing_only": True, "segment": 256},
    # Segments that walk their entering state from a warm-up back to where the decay since reaches e^-20
    # (forward.WARM_UP, FlashQLA's decay join in the event chain): no maps, more commits walked in all.
    "warm-up-256": {"segment": 256, "warm_up": 20.0},
    "warm-up-128": {"segment": 128, "warm_up": 20.0},
    "warm-up-256-separate": {"segment": 256, "warm_up": 20.0, "overlap": False},
    "chain-only-warm-up-256": {"chain_only": True, "timing_only": True, "segment": 256, "warm_up": 20.0},
    "chain-only-warm-up-128": {"chain_only": True, "timing_only": True, "segment": 128, "warm_up": 20.0},
    # The output pass alone at 8 warps a program (two launches: the output role then has a kernel of its own):
    # twice the warps an SM to hide its latency, at ~1.75x the instructions a chunk (compile_report).
    "separate-output-8warps": {"overlap": False, "configs": {"chunk_output": ({"GROUP": 1, "BV": 128}, 8, 2)}},
    "warm-up-128-separate": {"segment": 128, "warm_up": 20.0, "overlap": False},
    "warm-up-128-separate-output-8warps": {"segment": 128, "warm_up": 20.0, "overlap": False,
                                           "configs": {"chunk_output": ({"GROUP": 1, "BV": 128}, 8, 2)}},
    # The outputs split over two launches by whether a chunk starts from a zero state (forward.SPLIT_OUTPUTS): the
    # one launch runs the chains and the chunks with a state, then chunk_output.own_outputs the zero-state chunks
    # (three programs an SM under maxnreg 168); the chains whole or in warm-up segments.
    "split": {"split": True},
    "split-warm-up-128": {"split": True, "segment": 128, "warm_up": 20.0},
    "split-warm-up-256": {"split": True, "segment": 256, "warm_up": 20.0},
    "split-warm-up-512": {"split": True, "segment": 512, "warm_up": 20.0},
    # Without the zero-state programs, most of the one launch's output programs wait for a snapshot: in order of
    # readiness (state_output.READY_ORDER), or polling with plain loads (RELAXED_POLL).
    "split-warm-up-256-ready": {"split": True, "segment": 256, "warm_up": 20.0, "ready": True},
    "split-warm-up-256-relaxed": {"split": True, "segment": 256, "warm_up": 20.0, "relaxed_poll": True},
    # The decays of the output roles' products as row and column factors where a chunk's log decay spreads less
    # than 80 around its middle (band_solve.DECAY_SCALES, read at compile time): no 64 x 64 exponential grid.
    # compile_report: the own outputs' kernel 2,904 instructions a warp on that path against 3,240, 166 registers;
    # the one launch 5,088 against 5,408, with more local-memory instructions (94-104 against 70).
    "decay-scales": {"env": {"SPARSEGDN_DECAY_SCALES": "1"}},
    "decay-scales-split-warm-up-256": {"env": {"SPARSEGDN_DECAY_SCALES": "1"}, "split": True, "segment": 256,
                                       "warm_up": 20.0},
    # Pass 1 stores each chunk's gamma and k's inverse norms; the output roles read them instead of computing them
    # (forward.STORE_VECTORS, read at import). compile_report at 4K: the one launch 5,216 instructions a warp against
    # 5,424 and no local-memory instructions against 66; the split's own outputs 2,992 against 3,320 (maxnreg 168).
    "store-vectors": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}},
    "store-vectors-split-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "split": True, "segment": 256,
                                        "warm_up": 20.0},
    "store-vectors-split-warm-up-128": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "split": True, "segment": 128,
                                        "warm_up": 20.0},
    # With Tinv stored by pass 1 (forward.STORE_INVERSE) too: compile_report at 4K, the own outputs 1,888
    # instructions a warp against 2,992 (no solve), the one launch 4,032-4,112 against 5,096-5,208; pass 1 writes
    # 8 KB a chunk and head pair more (537 MB at 128K), read back by both output launches.
    "store-vectors-tinv-split-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "store": True, "split": True,
                                         "segment": 256, "warm_up": 20.0},
    "store-vectors-tinv-split-warm-up-128": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "store": True, "split": True,
                                         "segment": 128, "warm_up": 20.0},
    "store-vectors-decay-scales": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_DECAY_SCALES": "1"}},
    # The two launches with Tinv and the vectors stored, their output pass as chunk_output or over chunk lists in
    # Gluon (list_output.py, Hopper only; benchmarks/gluon_probe.py --output-pass: 1.29 against 2.01 ms at 128K),
    # with whole chains or warm-up segments, the zero-state list on the call's stream (list_output.SIDE_STREAM's
    # default since batch 22's call 9; before it these names ran it on a side stream) or beside the chains.
    "two-launches-stored": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True},
    "list-outputs": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True, "list_outputs": True},
    "list-outputs-side-stream": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_SIDE_STREAM": "1"},
                                 "overlap": False, "store": True, "list_outputs": True},
    "two-launches-stored-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True,
                                        "segment": 256, "warm_up": 20.0},
    "list-outputs-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True,
                                 "list_outputs": True, "segment": 256, "warm_up": 20.0},
    "list-outputs-side-stream-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_SIDE_STREAM": "1"},
                                             "overlap": False, "store": True, "list_outputs": True, "segment": 256,
                                             "warm_up": 20.0},
    "list-outputs-warm-up-128": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True,
                                 "list_outputs": True, "segment": 128, "warm_up": 20.0},
    # The same with band 1's Tinv not stored by pass 1 but solved in the list kernels (gluon_band_solve:
    # benchmarks/gluon_probe.py --output-pass --on-chip-only, 1.87 against 1.27 ms reading it at 128K), and the
    # two launches with chunk_output solving it. The lists' programs take fixed shares of their list; "-claim" has
    # them claim chunks from a counter (list_output.CLAIM). In batch 23 CLAIM was on by default for calls 4-6, so
    # there the names without "-claim" or "-fixed" ran claims and the "-fixed" names (now these) fixed shares.
    "list-outputs-solved": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": False,
                            "list_outputs": True},
    "list-outputs-solved-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": False,
                                        "list_outputs": True, "segment": 256, "warm_up": 20.0},
    "two-launches-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": False,
                                 "segment": 256, "warm_up": 20.0},
    "list-outputs-solved-side-stream": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_SIDE_STREAM": "1"},
                                        "overlap": False, "store": False, "list_outputs": True},
    "list-outputs-solved-side-stream-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1",
                                                            "SPARSEGDN_LIST_SIDE_STREAM": "1"},
                                                    "overlap": False, "store": False, "list_outputs": True,
                                                    "segment": 256, "warm_up": 20.0},
    "list-outputs-warm-up-256-claim": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_CLAIM": "1"},
                                       "overlap": False, "store": True, "list_outputs": True, "segment": 256,
                                       "warm_up": 20.0},
    "list-outputs-side-stream-claim": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_SIDE_STREAM": "1",
                                               "SPARSEGDN_LIST_CLAIM": "1"},
                                       "overlap": False, "store": True, "list_outputs": True},
    "list-outputs-solved-side-stream-claim": {"env": {"SPARSEGDN_STORE_VECTORS": "1",
                                                      "SPARSEGDN_LIST_SIDE_STREAM": "1", "SPARSEGDN_LIST_CLAIM": "1"},
                                              "overlap": False, "store": False, "list_outputs": True},
    # The two lists beside the chain pass on one stream (list_output.OVERLAP_LISTS): programmatic dependent launches,
    # the list with a state waiting tile by tile on the chains' progress counts (as the one launch's outputs do).
    "list-outputs-overlap": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_OVERLAP": "1"},
                             "overlap": False, "store": True, "list_outputs": True},
    "list-outputs-overlap-solved": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_OVERLAP": "1"},
                                    "overlap": False, "store": False, "list_outputs": True},
    "list-outputs-overlap-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_OVERLAP": "1"},
                                         "overlap": False, "store": True, "list_outputs": True, "segment": 256,
                                         "warm_up": 20.0},
    "list-outputs-overlap-solved-warm-up-256": {"env": {"SPARSEGDN_STORE_VECTORS": "1",
                                                        "SPARSEGDN_LIST_OVERLAP": "1"},
                                                "overlap": False, "store": False, "list_outputs": True,
                                                "segment": 256, "warm_up": 20.0},
    "list-outputs-overlap-claim": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_OVERLAP": "1",
                                           "SPARSEGDN_LIST_CLAIM": "1"},
                                   "overlap": False, "store": True, "list_outputs": True},
    "list-outputs-overlap-solved-claim": {"env": {"SPARSEGDN_STORE_VECTORS": "1", "SPARSEGDN_LIST_OVERLAP": "1",
                                                  "SPARSEGDN_LIST_CLAIM": "1"},
                                          "overlap": False, "store": False, "list_outputs": True},
    # Replayed from a CUDA graph at 32K (graphs.MAX_TOKENS raised). Measured in batch 23, when the list calls got no
    # launch plan (their launches were not Launcher's; they have one since batch 24, call 11).
    "list-outputs-warm-up-256-graph-32k": {"env": {"SPARSEGDN_STORE_VECTORS": "1"}, "overlap": False, "store": True,
                                           "list_outputs": True, "segment": 256, "warm_up": 20.0, "graph": True,
                                           "graph_max_tokens": 32768, "timing_only": True},
    # The event lists' pass (event_prepare) as it was before its row scales were folded into Tinv's columns and its
    # registers capped at 128 (both the default since 2026-12-03, batch 19: event_prepare's docstring), and folded
    # without the cap. compile_report at 4K: 232 registers unfolded, 150 folded, 128 capped (14 local-memory ops).
    "prepare-unfolded": {"env": {"SPARSEGDN_PREPARE_FOLD_SCALES": "0", "SPARSEGDN_PREPARE_MAXNREG": "0"}},
    "prepare-fold-no-cap": {"env": {"SPARSEGDN_PREPARE_MAXNREG": "0"}},
    # Short calls replayed from a CUDA graph (sparsegdn/triton/graphs.py, on by default up to graphs.MAX_TOKENS)
    # or always launched. The checks run given events, which are never graphed: the GPU matrix checks the graphed
    # path; here it is timed (the public call too, where the host's launches show).
    "graph": {"graph": True, "timing_only": True},
    "no-graph": {"graph": False, "timing_only": True},
    # Graphs for longer calls too (graphs.MAX_TOKENS raised): above 8K the public call is bound by the host's
    # launches after each call's sync (kernel_bench.notes.md, 2026-12-01 evening); the copies in and out grow
    # with the length, the launches saved do not.
    "graph-32k": {"graph": True, "graph_max_tokens": 32768, "timing_only": True},
    "graph-64k": {"graph": True, "graph_max_tokens": 65536, "timing_only": True},
    "graph-128k": {"graph": True, "graph_max_tokens": 131072, "timing_only": True},
    "select-graph-64k": {"graph": True, "graph_max_tokens": 65536, "select_kernel": True, "timing_only": True},
    # The one launch's chain programs publish their progress every state_output.PUBLISH commits (16): each
    # count ends a pipelined run (its loads issued again from empty, a barrier and a GPU-scope fence).
    # Fewer counts, a longer wait for the outputs; chain-only-publish-end times the chains publishing once.
    "publish-64": {"publish": 64},
    "chain-only-publish-end": {"chain_only": True, "publish": 1 << 20, "timing_only": True},
    # The one launch holds 255 registers a thread: two programs an SM. Capped at 168 (maxnreg, spills to local
    # memory instead), three fit by registers and by shared memory at 2 stages (71,688 B).
    "overlap-2stages-reg168": {"configs": {"state_output": ({"STATE_BV": 16, "BV": 128}, 4, 2, 168)}},
    "overlap-bv64-2stages-reg168": {"configs": {"state_output": ({"STATE_BV": 16, "BV": 64}, 4, 2, 168)}},
    # The chains alone walk faster in the two launches' state pass (0.44 ms at 32K) than in the one launch (0.67
    # publishing once): which state-pass config the autotuner picks there, and chain blocks of 8 columns
    # (mma.sync products, 51 KB of shared memory at 3 stages) in the one launch.
    "separate-state-bv8": {"overlap": False, "configs": {"state_pass": ({"BV": 8}, 4, 3)}},
    "separate-state-bv16": {"overlap": False, "configs": {"state_pass": ({"BV": 16}, 4, 3)}},
    "overlap-state-bv8": {"configs": {"state_output": ({"STATE_BV": 8, "BV": 128}, 4, 3)}},
    "chain-only-state-bv8": {"chain_only": True, "timing_only": True,
                             "configs": {"state_output": ({"STATE_BV": 8, "BV": 128}, 4, 3)}},
    # The row scales of k and v folded into M's and Tinv's columns (chunk_loads.FOLD_SCALES, read when the kernels
    # are compiled: timed only in a process started with the setting, see time_variants): compile_report shows
    # the one launch without local-memory spills (0 against 92 instructions) at the same instruction count.
    "fold-scales": {"env": {"SPARSEGDN_FOLD_SCALES": "1"}},
    "fold-scales-separate": {"env": {"SPARSEGDN_FOLD_SCALES": "1"}, "overlap": False},
    # With Tinv stored by pass 1 the output role has no solve either (compile_report: 3,144 instructions a warp
    # a chunk and 18 local-memory ones, against 4,368 and 116 for the default's output pass).
    "fold-scales-stored": {"env": {"SPARSEGDN_FOLD_SCALES": "1"}, "store": True},
    # Chunks that start from a zero state computed in full (chunk_output.SKIP_ZERO_STATE off): what the skip gives.
    "no-zero-skip": {"env": {"SPARSEGDN_SKIP_ZERO_STATE": "0"}},
    "no-zero-skip-stored": {"env": {"SPARSEGDN_SKIP_ZERO_STATE": "0"}, "store": True},
    # The `score` selection in one launch and the lists written whole by the schedule kernel (schedule.SELECT_KERNEL).
    "select-kernel": {"select_kernel": True},
    "torch-topk": {"select_kernel": False},     # torch's top-k, the selection before select_kernel was the default
    # Every call launched through Python (call_plans.CALL_PLANS off), as before the plans.
    "no-plans": {"call_plans": False},
}
# A variant's design keys and the module switch each sets (sparsegdn/triton/forward.py, state_output.py).
DESIGN_SWITCHES = {"overlap": ("forward", "OVERLAP"), "paired": ("forward", "PAIRED"),
                   "store": ("forward", "STORE_INVERSE"), "ready": ("state_output", "READY_ORDER"),
                   "relaxed_poll": ("state_output", "RELAXED_POLL"), "chain_only": ("state_output", "CHAIN_ONLY"),
                   "graph": ("graphs", "CUDA_GRAPH"), "segment": ("forward", "COMMIT_SEGMENT"), "warm_up": ("forward", "WARM_UP"),
                   "split": ("forward", "SPLIT_OUTPUTS"),
                   "delta_maps": ("segment_maps", "DELTA_MAPS"), "publish": ("state_output", "PUBLISH"),
                   "select_kernel": ("schedule", "SELECT_KERNEL"), "graph_max_tokens": ("graphs", "MAX_TOKENS"),
                   "call_plans": ("call_plans", "CALL_PLANS"), "list_outputs": ("list_output", "LIST_OUTPUTS"),
                   "lists_from": ("forward", "LISTS_FROM")}
# The switches' values a variant that does not name them runs under: as imported (the library's defaults, or the
# environment's), except forward.LISTS_FROM, which is 0 here, so that every variant's long calls run the one launch
# it studies, as in the batches before the lists became the default for long calls (batch 25); the variant
# "default-lists" keeps the imported value (IMPORTED), the library's own choice.
PROBE_DEFAULTS = {"lists_from": 0}
DESIGN_DEFAULTS = {}        # the imported values, read once before any variant
TIMED_SHAPE = dict(B=1, H=16, HV=32, K=128, V=128)     # the benchmark's (benchmarks/kernel_bench.py)


def kernels():
    from sparsegdn.triton import chunk_output, intra_chunk, state_output, state_pass
    return {"chunk_output": chunk_output, "intra_chunk": intra_chunk, "state_pass": state_pass,
            "state_output": state_output, "own_output": chunk_output}


def apply_variant(name):
    """Force the variant's configs and design in this process; forget every tuned config and launch plan."""
    import triton
    from sparsegdn.triton import call_plans, forward, graphs, list_output, schedule, segment_maps, state_output
    variant = VARIANTS[name]
    modules = {"forward": forward, "state_output": state_output, "graphs": graphs, "segment_maps": segment_maps,
               "schedule": schedule, "call_plans": call_plans, "list_output": list_output}
    graphs.clear()
    call_plans.clear()      # a plan replays the compiled kernels it recorded: none may outlive a forced config
    for key, (module_name, attribute) in DESIGN_SWITCHES.items():
        module = modules[module_name]
        imported = DESIGN_DEFAULTS.setdefault(key, getattr(module, attribute))     # before any variant
        value = variant.get(key, PROBE_DEFAULTS.get(key, imported))
        setattr(module, attribute, imported if value == IMPORTED else value)
    for kernel_name, module in kernels().items():
        kernel = getattr(module, f"{kernel_name}_kernel")
        if not hasattr(kernel, "original_configs"):
            kernel.original_configs = list(kernel.configs)
        forced = variant.get("configs", {}).get(kernel_name)
        kernel.configs = ([triton.Config(forced[0], num_warps=forced[1], num_stages=forced[2],
                                         maxnreg=forced[3] if len(forced) > 3 else None)] if forced
                          else list(kernel.original_configs))
        kernel.cache.clear()
        getattr(module, f"launch_{kernel_name}").plans.clear()


def run_variant(name):
    """In this process: force the variant's config, run every case in both designs, print JSON."""
    import torch
    sys.path.insert(0, str(ROOT / "tests"))
    from gdn_inputs import random_events, random_inputs, rel_err

    import sparsegdn
    from sparsegdn import api
    from sparsegdn.triton import forward
    variant = VARIANTS[name]
    apply_variant(name)
    cases = CASES
    if variant.get("head32"):
        api.MIN_GPU_HEAD_SIZE = 16
        cases = CASES + HEAD32_CASES
    results = []
    for batch, tokens, heads, value_heads, key_dim, value_dim, band, dtype, initial in cases:
        q, k, v, g, beta, s0 = random_inputs(batch, tokens, heads, value_heads, key_dim, value_dim,
                                             dtype=getattr(torch, dtype), initial_state=initial, device="cuda", seed=7)
        events = random_events(batch, value_heads, sparsegdn.num_chunks(tokens), seed=tokens, p=0.35).cuda()
        if not initial:        # late first commits and an empty chain: chunks that start from a zero state
            events[:, ::2, : events.shape[-1] // 2] = False
            events[-1, 1] = False
        ref = sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, events=events, band=band, initial_state=s0,
                                                output_final_state=True, backend="torch")
        for store in (True, False):
            forward.STORE_INVERSE = store
            case = (f"B{batch}-T{tokens}-H{heads}-HV{value_heads}-K{key_dim}-V{value_dim}-band{band}-{dtype}-"
                    + ("" if initial else "no-initial-") + ("stored" if store else "on_chip"))
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


def unset_settings(name) -> dict:
    """The variant's settings read at import or compile time ("env") that this process's environment lacks."""
    return {key: value for key, value in VARIANTS[name].get("env", {}).items() if os.environ.get(key) != value}


def time_variants(names, lengths, spawn=True):
    """One variant after another: the backend entry's median ms and its stage times at each of `lengths` on the
    benchmark's inputs (budget 0.29, band 1, `score`, final state returned). Prints JSON. A variant whose setting
    is read at import or compile time ("env") and is not this process's is timed next, in a process of its own
    started with it (spawn; without, it is reported as not timed), one process at a time: the GPU is never shared."""
    runnable, elsewhere = [], []
    for name in names:
        unset = unset_settings(name)
        (elsewhere if unset else runnable).append((name, unset))
    for tokens in lengths:
        time_variants_at([name for name, _ in runnable], tokens)
    for name, unset in elsewhere:
        if not spawn or not lengths:
            print("TIMED " + json.dumps({"variant": name, "error": f"needs {unset} in this process's environment"}),
                  flush=True)
            continue
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
            sys.modules["torch"].cuda.empty_cache()          # the child's memory is not this process's cache
        try:
            done = subprocess.run([sys.executable, __file__, "--timed", name, "--no-spawn", "--time",
                                   *map(str, lengths)], env=dict(os.environ, **unset), capture_output=True, text=True,
                                  timeout=600, cwd=ROOT)
        except subprocess.TimeoutExpired as error:      # its output comes as bytes, whatever `text` says
            out = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout or ""
            rows, ended = [line for line in out.splitlines() if line.startswith("TIMED ")], "its process ran past 600 s"
        else:
            rows = [line for line in done.stdout.splitlines() if line.startswith("TIMED ")]
            ended = f"its process ended with {done.returncode}: {done.stderr[-200:]}" if done.returncode else None
        if rows:
            print("\n".join(rows), flush=True)
        if ended:
            print("TIMED " + json.dumps({"variant": name, "error": ended}), flush=True)


def time_variants_at(names, tokens):
    import torch
    import triton
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import kernel_bench
    from sparsegdn import SparseConfig
    from sparsegdn.triton import forward
    inputs = kernel_bench.make_inputs(tokens)
    config = SparseConfig(budget=0.29, band=1, selector="score", backend="triton")
    for name in names:
        apply_variant(name)
        design = (forward.STORE_INVERSE, forward.COMMIT_SEGMENT)

        def entry():
            kernel_bench.set_design(design)
            return kernel_bench.backend_entry(inputs, config)
        try:
            entry()
            torch.cuda.synchronize()
            runs = [triton.testing.do_bench(entry, warmup=25, rep=100, return_mode="median") for _ in range(2)]
            public = [triton.testing.do_bench(lambda: kernel_bench.public_call(inputs, config), warmup=25, rep=100,
                                              return_mode="median") for _ in range(2)]
            stages = kernel_bench.stage_times(inputs, config, design)
            peak = kernel_bench.peak_extra_mb(entry)
            print("TIMED " + json.dumps({"variant": name, "tokens": tokens, "entry_ms": runs, "public_ms": public,
                                         "stage_ms": stages, "peak_extra_mb": peak}), flush=True)
        except Exception as error:  # noqa: BLE001 - reported; a CUDA fault ends this process
            print("TIMED " + json.dumps({"variant": name, "error": f"{type(error).__name__}: {str(error)[:160]}"}),
                  flush=True)
            if "CUDA" in str(error) or "illegal" in str(error):
                break


def timed_line(row) -> str:
    """One timed row (a TIMED line's JSON) as text: variant, length, the backend entry's and the public call's
    two medians, the stage times; or the variant's error."""
    if "error" in row:
        return f"{row['variant']:20s} {row['error']}"
    public = row.get("public_ms")                       # absent in rows timed before the public call was
    return (f"{row['variant']:20s} T={row['tokens']:6d} entry {min(row['entry_ms']):.3f}-{max(row['entry_ms']):.3f} "
            + (f"public {min(public):.3f}-{max(public):.3f} ms  " if public else "ms, public not timed  ")
            + " ".join(f"{stage}={ms:.3f}" for stage, ms in row["stage_ms"].items()))


def timed_rows(output: str) -> list[dict]:
    """The TIMED rows in the output of --timed."""
    return [json.loads(line[len("TIMED "):]) for line in output.splitlines() if line.startswith("TIMED ")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--time", type=int, nargs="+", default=[], metavar="TOKENS",
                        help="then time the variants that passed at these lengths, one process, one after another")
    parser.add_argument("--only", nargs="+", default=None, choices=sorted(VARIANTS), help="these variants only")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timed", nargs="+", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-spawn", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--summarize", type=Path, default=None, help="print the timed rows of a log of --timed")
    args = parser.parse_args()
    if args.summarize:
        for row in timed_rows(args.summarize.read_text()):
            print(timed_line(row))
        return None
    if args.one:
        return run_variant(args.one)
    if args.timed:
        return time_variants(args.timed, args.time, spawn=not args.no_spawn)
    names = [name for name in args.only or list(VARIANTS) if not VARIANTS[name].get("timing_only")]

    def launch(name):
        env = dict(os.environ, **VARIANTS[name].get("env", {}))
        done = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True,
                              timeout=400, cwd=ROOT)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if lines:
            return json.loads(lines[-1][len("RESULT "):])
        return {"variant": name, "crashed": done.returncode, "stderr": done.stderr[-600:]}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        reports = list(pool.map(launch, names))
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
    timed = []
    passed = [report["variant"] for report in reports if "crashed" not in report and not VARIANTS[report["variant"]].get(
        "env") and not VARIANTS[report["variant"]].get("head32") and all(
        "error" not in r and r["o_err"] <= 2e-2 and r["s_err"] <= 2e-2 for r in report["results"])]
    if args.time and passed:
        done = subprocess.run([sys.executable, __file__, "--timed", *passed, "--time", *map(str, args.time)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
        timed = timed_rows(done.stdout)
        if done.returncode:
            print(f"timing process ended with {done.returncode}: {done.stderr[-300:]!r}")
        print("\nbackend entry and public call, budget 0.29, band 1, score (ms; two do_bench medians), stages:")
        for row in timed:
            print(timed_line(row))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "config_probe.json").write_text(json.dumps({"checks": reports, "timed": timed}, indent=1))


if __name__ == "__main__":
    main()
