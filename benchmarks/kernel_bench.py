"""GDN-core prefill speed on the GPU, measured as docs/CONTRACT.md section 6 says (a benchmark, not a test).

    FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py [--tokens 4096 ...] [--out analysis/results]
    python benchmarks/kernel_bench.py --render analysis/results/kernel_bench.json   # rewrite its .md only

Contenders on the same inputs, in one process, interleaved, each measured in ROUNDS rounds (median of
triton.testing.do_bench each, then the median of the rounds; every round is in the JSON, and the README shows the
public call's lowest and highest), all with output_final_state=True and keys
normalised in the kernel: FLA 0.6.0's native chunk_gated_delta_rule, FlashQLA 0.1.3 (auto_cp=True)
when it imports, and the PUBLIC sparsegdn.sparse_gated_delta_rule call (checks and selection
included) at budgets 1.0, 0.5, 0.29, 0.15 with band 1 and the `score` selector, plus dense semantics
through our path (budget 1.0, band 3, `all`). Each SparseGDN configuration is timed in both designs of
the GPU path (Tinv stored by the intra-chunk pass, or solved again on chip where it is used); the
backend entry (no checks) and per-stage times (sparsegdn.STAGES) are recorded for the default
design, with the peak extra GPU memory of each public call and the git commit of the code measured.
Writes kernel_bench.json (one row per T x configuration x design; fields in analysis/measurements.py)
after every length, and kernel_bench.md; the README's table comes from the JSON
(python -m analysis.front_page).
"""
import argparse
import datetime
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("FLA_FLASH_QLA", "0")     # FLA's native Triton path, not its FlashQLA dispatch

import torch                                   # noqa: E402
import triton                                  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import sparsegdn                               # noqa: E402
from sparsegdn import STAGES, SparseConfig     # noqa: E402
from sparsegdn import validation              # noqa: E402
from sparsegdn.triton import call_plans, forward, graphs, intra_chunk, list_output, schedule, state_pass   # noqa: E402

B, H, HV, K, V = 1, 16, 32, 128, 128
# Timed rounds of every contender, interleaved. Two until 2026-12-01; five since the public call's figure was seen
# to move by up to 30% between rounds of one process (its host work after each sync; kernel_bench.notes.md).
ROUNDS = 5
WALL_CALLS = 50             # back-to-back public calls a wall-clock loop (api_wall_ms), three loops
CONFIGS = [SparseConfig(budget=budget, band=band, selector=selector, backend="triton") for budget, band, selector in
           ((1.0, 1, "score"), (0.5, 1, "score"), (0.29, 1, "score"), (0.15, 1, "score"), (1.0, 3, "all"))]
# Designs of the GPU path: (forward.STORE_INVERSE, forward.COMMIT_SEGMENT); STORE_INVERSE None: chosen by band.
# "segmented" cuts each head pair's commit chain into runs of 64 commits run side by side (no effect below
# 64 chunks); on the H200 (2026-11-30) it computed correctly but its state pass was slower than the whole
# chain's (analysis/results/state_pass_designs.json). It only runs when asked for (--designs).
# "by_band" is the default since 2026-12-02 (forward.store_inverse: on chip for band 1, stored for bands 2 and 3).
# "lists_overlap": the two-launch form with the outputs by the Gluon lists beside the chain pass (list_output.py:
# OVERLAP_LISTS with CLAIM, the vectors stored, Tinv by band: solved in the lists at band 1; Hopper, K = V = 128,
# else the lists refuse and chunk_output writes the outputs after the chains) at every length and budget; "by_band"
# takes the same lists by default for long calls whose selection keeps at most half of the events (forward.LISTS_FROM,
# batch 25), "one_launch" never (LISTS_FROM 0: the one launch everywhere, the default before batch 25), so that one
# process can time the default against both. "folded" and "one_launch_folded": by_band and one_launch with the commits
# folded (forward.FOLD_COMMITS); "streamed": by_band with the events prepared while the chains beside the lists walk
# (forward.STREAM_PREPARE; calls that run the one launch are unchanged); "transposed" and "streamed_transposed": by_band
# and streamed with the chains beside the lists committing on the state's transpose (state_pass.TRANSPOSED), at this
# process's chain blocks (SPARSEGDN_CHAIN_BV: 64 for the register operands it is meant for, and by_band's chains in
# that process walk blocks of 64 too); "transposed_tma": transposed with the snapshots stored by TMA
# (state_pass.TMA_SNAPSHOTS). The lists' stage times are indicative only: the
# stage hook's events sit between the chain pass and the lists (and no plan serves a hooked call), so the overlap they
# time is not the timed call's.
DESIGNS = {"by_band": (None, 0), "stored": (True, 0), "on_chip": (False, 0), "segmented": (True, 64),
           "lists_overlap": (None, 0, "lists"), "one_launch": (None, 0, "one_launch"),
           "folded": (None, 0, "fold"), "one_launch_folded": (None, 0, "one_launch_fold"),
           "streamed": (None, 0, "stream"), "transposed": (None, 0, "transpose"),
           "streamed_transposed": (None, 0, "stream_transpose"), "transposed_tma": (None, 0, "transpose_tma")}
# "process": by_band with this process's own SPARSEGDN_COMMIT_SEGMENT (the others set their own: 0, 64 for segmented),
# so that a process started with the one launch's segments (SPARSEGDN_COMMIT_SEGMENT, SPARSEGDN_WARM_UP) times them
# beside by_band's whole chains in the same rounds. Batch 29's first timing of segments beside the lists
# named by_band alone and so timed whole chains in every process (analysis/results/overlap/batch29/calls.md).
# "whole_chains": by_band with the lists' chains walked whole (forward.LISTS_SEGMENT 0), the baseline beside by_band,
# which takes the lists' segments (their default, "half", or the process's SPARSEGDN_LISTS_SEGMENT).
DESIGNS["process"] = (None, forward.COMMIT_SEGMENT)
DESIGNS["whole_chains"] = (None, 0, "whole")
# "early": by_band with the early checks (forward.EARLY_CHECKS: a scan of q and the initial state, then pass 1 checks
# k, v and g, and the public call waits for their flags only); its public call against by_band's, and each against its
# own entry, is what it is timed for.
DESIGNS["early"] = (None, 0, "early")
# "waiting": by_band with the early checks off (the public call waits for its last kernel), by_band's design until the
# early checks became the default.
DESIGNS["waiting"] = (None, 0, "waiting")
# "lists_any_length": by_band with the lists' length conditions lifted (forward.LISTS_FROM and LISTS_MIN_ROW_CHUNKS
# 1, LISTS_MIN_ROWS 0): the default's route of long calls (the lists beside the chains, their segments, claims) at
# every length, where the budget and the inputs let list_output serve them, so that short calls can time it against
# the one launch (by_band there) in one process. The budget's condition (LISTS_MAX_BUDGET) stays.
DESIGNS["lists_any_length"] = (None, 0, "any_length")
# "select_before" and "select_after": the selection's kernels and pass 1's launch as they were before batch 49 (a bit of
# the threshold a step, schedule.SELECT_STEP_BITS 1; the earlier head pairs' events a row a load, schedule.SCHEDULE_LOAD
# 0; pass 1 after the early scan, intra_chunk.EARLY_BESIDE off) and in batch 49's forms (two bits a step, loads of
# 4,096 events, pass 1 beside the scan), so that one process times both whatever the defaults are; "beside_only" the
# forms before with pass 1 beside the scan, "search_only" the forms before with batch 49's selection kernels.
DESIGNS["select_before"] = (None, 0, "select_before")
DESIGNS["select_after"] = (None, 0, "select_after")
DESIGNS["beside_only"] = (None, 0, "beside_only")
DESIGNS["search_only"] = (None, 0, "search_only")
# "scan_in_selection": by_band with the early checks' scan run by select_kernel's launch (schedule.SCAN_BESIDE_SELECT)
# instead of beside pass 1.
DESIGNS["scan_in_selection"] = (None, 0, "scan_in_selection")
# select_kernel's forms built after batch 50 (off by default): "select_wide" the bit-a-step search with 8 keys a
# thread (schedule.SELECT_THREAD_KEYS: 16 warps at 8K tokens, 32 from 16K, against 4 and 8), "select_radix" a byte a
# step (schedule.SELECT_STEP_BITS 8: four 256-bin histograms) and "select_nibble" four bits a step (eight 16-bin
# histograms), both with 8 keys a thread. Timed in batch 51 (H100, call 3): none faster (schedule.py's comments).
DESIGNS["select_wide"] = (None, 0, "select_wide")
DESIGNS["select_radix"] = (None, 0, "select_radix")
DESIGNS["select_nibble"] = (None, 0, "select_nibble")
# The designs that never walk the lists' segments (forward.LISTS_SEGMENT): off the default lists (the one launch, the
# lists by switch) or with them set to 0.
WHOLE_BESIDE_LISTS = ("whole_chains", "one_launch", "one_launch_folded", "lists_overlap", "segmented")
# The segment settings the process was started with (set_design changes forward's switches): the lists' own only where
# SPARSEGDN_LISTS_SEGMENT names them (their default, "half", is every design's that leaves it alone).
PROCESS_SEGMENTS = (forward.COMMIT_SEGMENT,
                    forward.LISTS_SEGMENT if "SPARSEGDN_LISTS_SEGMENT" in os.environ else 0)
# The switches a tagged design sets ((module, name), value); set_design puts back what they were when the next
# design without that tag is set.
TAGGED_SWITCHES = {"lists": (((forward, "OVERLAP"), False), ((forward, "STORE_VECTORS"), True),
                             ((list_output, "LIST_OUTPUTS"), True), ((list_output, "OVERLAP_LISTS"), True),
                             ((list_output, "CLAIM"), True)),
                   "one_launch": (((forward, "LISTS_FROM"), 0),),
                   "any_length": (((forward, "LISTS_FROM"), 1), ((forward, "LISTS_MIN_ROW_CHUNKS"), 1),
                                  ((forward, "LISTS_MIN_ROWS"), 0)),
                   "whole": (((forward, "LISTS_SEGMENT"), 0),),
                   "select_before": (((schedule, "SELECT_STEP_BITS"), 1), ((schedule, "SCHEDULE_LOAD"), 0),
                                     ((intra_chunk, "EARLY_BESIDE"), False)),
                   "select_after": (((schedule, "SELECT_STEP_BITS"), 2), ((schedule, "SCHEDULE_LOAD"), 4096),
                                    ((intra_chunk, "EARLY_BESIDE"), True)),
                   "beside_only": (((schedule, "SELECT_STEP_BITS"), 1), ((schedule, "SCHEDULE_LOAD"), 0),
                                   ((intra_chunk, "EARLY_BESIDE"), True)),
                   "search_only": (((schedule, "SELECT_STEP_BITS"), 2), ((schedule, "SCHEDULE_LOAD"), 4096),
                                   ((intra_chunk, "EARLY_BESIDE"), False)),
                   "scan_in_selection": (((schedule, "SCAN_BESIDE_SELECT"), True),),
                   "select_wide": (((schedule, "SELECT_STEP_BITS"), 1), ((schedule, "SELECT_THREAD_KEYS"), 8)),
                   "select_radix": (((schedule, "SELECT_STEP_BITS"), 8), ((schedule, "SELECT_THREAD_KEYS"), 8)),
                   "select_nibble": (((schedule, "SELECT_STEP_BITS"), 4), ((schedule, "SELECT_THREAD_KEYS"), 8)),
                   "early": (((forward, "EARLY_CHECKS"), True),),
                   "waiting": (((forward, "EARLY_CHECKS"), False),),
                   "fold": (((forward, "FOLD_COMMITS"), True),),
                   "one_launch_fold": (((forward, "LISTS_FROM"), 0), ((forward, "FOLD_COMMITS"), True)),
                   "stream": (((forward, "STREAM_PREPARE"), True),),
                   "transpose": (((state_pass, "TRANSPOSED"), True),),
                   "stream_transpose": (((forward, "STREAM_PREPARE"), True), ((state_pass, "TRANSPOSED"), True)),
                   "transpose_tma": (((state_pass, "TRANSPOSED"), True), ((state_pass, "TMA_SNAPSHOTS"), True))}
_saved_switches = {}        # tag: the values its switches had before the tag's design set them
DEFAULT_DESIGNS = ("by_band",)


def label(config: SparseConfig) -> str:
    return f"{config.budget}/{config.band}/{config.selector}"


def sources_digest() -> str:
    """sha256 (12 hex) of the library's sources and this script: names the code measured where the
    checkout's git history is stale or absent (a copied tree); `--digest` prints it for a local checkout."""
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "sparsegdn").rglob("*.py"), Path(__file__).resolve()]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def process_settings() -> str:
    """The library's settings this process was started with (SPARSEGDN_*, read at import), as a command's prefix
    ("" where none): a row's `command` then says how to run it again."""
    named = sorted((name, value) for name, value in os.environ.items() if name.startswith("SPARSEGDN_"))
    return "".join(f"{name}={shlex.quote(value)} " for name, value in named)


def build() -> str:
    """The git commit of the code measured ('-dirty' when the working tree differs from it) and the
    sources' digest, which stays true when the git history travelled stale."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:     # no git on this machine
            return ""
    commit = git("rev-parse", "--short=12", "HEAD")
    sources = f"sources {sources_digest()}"
    if not commit:
        return sources
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "") + f", {sources}"


def make_inputs(tokens, seed=0, *, batch=B, heads=H, value_heads=HV):
    """Random inputs, never zeros; head pairs with decay speeds from fast to slow, as in a real layer. The benchmark's
    shape by default (B, H, HV); other batch rows and heads for probes of other shapes (route_shapes.py)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, tokens, heads, K, device="cuda", generator=gen).bfloat16()
    k = torch.randn(batch, tokens, heads, K, device="cuda", generator=gen).bfloat16()
    v = torch.randn(batch, tokens, value_heads, V, device="cuda", generator=gen).bfloat16()
    speed = torch.linspace(-2.0, 6.0, value_heads, device="cuda")   # logsigmoid(x + speed): slow to fast heads
    g = torch.nn.functional.logsigmoid(torch.randn(batch, tokens, value_heads, device="cuda", generator=gen) + speed)
    beta = torch.rand(batch, tokens, value_heads, device="cuda", generator=gen).mul(0.9).add(0.05).bfloat16()
    return q, k, v, g.float(), beta


def public_call(inputs, config: SparseConfig, **options):
    """The public sparse_gated_delta_rule on `inputs` (q, k, v, g, beta) as every contender is called:
    keys normalised in the kernel, final state returned; `options` (a stage_hook) passed on."""
    q, k, v, g, beta = inputs
    return sparsegdn.sparse_gated_delta_rule(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, output_final_state=True,
                                             config=config, **options)


def backend_entry(inputs, config: SparseConfig):
    """The Triton backend's entry alone (no checks around it) on `inputs`, called as public_call calls the
    public function. Returns what sparse_gdn_forward returns (its flags last)."""
    q, k, v, g, beta = inputs
    return forward.sparse_gdn_forward(q, k, v, g, beta, events=None, budget=config.budget, selector=config.selector,
                                      band=config.band, scale=q.shape[-1] ** -0.5, initial_state=None,
                                      output_final_state=True, use_qk_l2norm_in_kernel=True)


def design_of(config: SparseConfig, default_setting) -> str | None:
    """The name of the design the library's default runs `config` in, among the designs being measured: the
    default setting itself where it is one of them (by_band), else the design by_band picks for the config's band
    (forward.store_inverse), so a run of --designs on_chip stored still marks the rows the library's call matches."""
    named = next((d for d, s in DESIGNS.items() if s == default_setting), None)
    if named is not None:
        return named
    chosen = (forward.store_inverse(config.band), default_setting[1])     # forward's switches at their defaults here
    return next((d for d, s in DESIGNS.items() if s == chosen), None)


def set_design(design):
    """forward's switches for `design` (a DESIGNS value); a tagged design also sets its TAGGED_SWITCHES, and the next
    design without the tag puts back what they were (a probe's own settings of them stay as the probe made them)."""
    forward.STORE_INVERSE, forward.COMMIT_SEGMENT = design[:2]
    tag = design[2] if len(design) > 2 else None
    for name, switches in TAGGED_SWITCHES.items():     # first what other tags set is put back (tags share switches)
        if name != tag and name in _saved_switches:
            for ((module, attribute), _), value in zip(switches, _saved_switches.pop(name)):
                setattr(module, attribute, value)
    if tag is not None and tag not in _saved_switches:
        switches = TAGGED_SWITCHES[tag]
        _saved_switches[tag] = tuple(getattr(module, attribute) for (module, attribute), _ in switches)
        for (module, attribute), value in switches:
            setattr(module, attribute, value)


def takes_lists(inputs, config: SparseConfig, design) -> bool:
    """Whether the public call of `config` runs the output lists beside the chain pass in `design`: by its switches
    (the lists designs) or by forward.LISTS_FROM where the one launch is on."""
    set_design(design)
    q, k, v = inputs[:3]
    if list_output.LIST_OUTPUTS and list_output.OVERLAP_LISTS:      # where list_output can serve them
        solved = not forward.store_inverse(config.band)
        return list_output.eligible_inputs(q, k, v, solved, v.dtype, config.band) is None
    return forward.lists_by_default(q, k, v, config.band, v.dtype,
                                    forward.selected_share(None, config.budget, config.selector))


def with_design(design, fn):
    def run():
        set_design(design)
        return fn()
    return run


def contenders(inputs):
    q, k, v, g, beta = inputs
    scale = K ** -0.5
    runs = {}
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
        runs["fla"] = lambda: fla_gdn(q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True,
                                      output_final_state=True)
    except ImportError as error:
        print("FLA not available:", error)
    try:
        import flash_qla
        runs["flashqla"] = lambda: flash_qla.chunk_gated_delta_rule(
            q, k, v, g, beta, scale=scale, use_qk_l2norm_in_kernel=True, output_final_state=True, auto_cp=True)
    except ImportError as error:
        print("FlashQLA not available:", error)
    for config in CONFIGS:
        for design, setting in DESIGNS.items():    # the public call: the figure that counts
            runs[f"api/{design}/{label(config)}"] = with_design(
                setting, lambda config=config: public_call(inputs, config))
        for design, setting in DESIGNS.items():    # the kernels without the call around them
            runs[f"entry/{design}/{label(config)}"] = with_design(
                setting, lambda config=config: backend_entry(inputs, config))
    return runs


def peak_extra_mb(fn):
    """MB allocated during fn() over what was allocated before, with CUDA graphs off: a replayed call's
    buffers are allocated once, at its capture, and kept (graphs.py); this is their size."""
    keep, graphs.CUDA_GRAPH = graphs.CUDA_GRAPH, False
    try:
        return _peak_extra_mb(fn)
    finally:
        graphs.CUDA_GRAPH = keep


def _peak_extra_mb(fn):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def stage_times(inputs, config, design, repeats=10):
    """Median ms of each stage of the public call (sparsegdn.STAGES), CUDA events at its stage hook."""
    set_design(design)
    samples = {name: [] for name in STAGES}
    for _ in range(repeats):
        marks = [torch.cuda.Event(enable_timing=True)]
        marks[0].record()

        def hook(name):
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append(event)
        public_call(inputs, config, stage_hook=hook)
        torch.cuda.synchronize()
        for name, start, end in zip(STAGES, marks[:-1], marks[1:]):
            samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(values) for name, values in samples.items()}


def minimum_traffic_bytes(tokens):
    """q, k, v, g, beta read once, o written once, the final state written once."""
    qk = B * tokens * H * K * 2
    vv = B * tokens * HV * V * 2
    gates = B * tokens * HV * (4 + 2)
    return 2 * qk + 2 * vv + gates + B * HV * K * V * 4


def ceilings():
    """Measured device-to-device copy bandwidth (bytes/s) and bf16 matrix rate (FLOP/s)."""
    x = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    bandwidth = 2 * x.numel() * 2 / (ms * 1e-3)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ a, return_mode="median")
    return bandwidth, 2 * 8192 ** 3 / (ms * 1e-3)


def autotune_choices():
    """The config the autotuner kept for each of our kernels (key -> config), as text."""
    from sparsegdn.triton import chunk_output, intra_chunk, state_output, state_pass
    kernels = {"intra_chunk": intra_chunk.intra_chunk_kernel, "state_pass": state_pass.state_pass_kernel,
               "chunk_output": chunk_output.chunk_output_kernel, "state_output": state_output.state_output_kernel}
    return {name: {str(key): str(config) for key, config in getattr(kernel, "cache", {}).items()}
            for name, kernel in kernels.items()}


def loop_walls(fn, loops, calls):
    """Wall-clock ms a call of each of `loops` loops of `calls` back-to-back calls, in order, the device waited for
    at each loop's end (no cache flush between calls, unlike do_bench; the device queue overlaps the host's next
    launches unless the call itself syncs, as the public call does on its flags)."""
    walls = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3 / calls)
    return walls


# The caching allocator's calls into the driver (torch.cuda.memory_stats): a cudaMalloc or cudaFree inside a timed
# call costs host time and synchronizes the device.
ALLOCATOR_COUNTS = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def allocator_counts() -> dict:
    """ALLOCATOR_COUNTS so far on the current device (0 where this torch lacks one)."""
    stats = torch.cuda.memory_stats()
    return {name: stats.get(name, 0) for name in ALLOCATOR_COUNTS}


def driver_calls() -> int:
    """cudaMalloc and cudaFree calls of the caching allocator so far (allocator_counts)."""
    counts = allocator_counts()
    return counts["num_device_alloc"] + counts["num_device_free"]


def how_called(fn) -> tuple[bool, bool]:
    """(planned, early) from two more calls of fn: whether they were launched from a recorded plan (call_plans.py,
    the plans' replays counted) and whether both waited for the early checks' flags only (forward.EARLY_CHECKS,
    the calls the early checks cleared counted: validation.early_returns; a CUDA graph's replay runs without them)."""
    replays, returns = call_plans.replays, validation.early_returns
    fn()
    fn()
    torch.cuda.synchronize()
    return call_plans.replays > replays, validation.early_returns == returns + 2


def wall_per_call(fn, loops=3, calls=WALL_CALLS):
    """Median of loop_walls after one call: what a caller calling in a loop gets."""
    fn()
    torch.cuda.synchronize()
    return statistics.median(loop_walls(fn, loops, calls))


def timed_rounds(runs: dict, rounds: int = ROUNDS) -> tuple[dict, dict]:
    """({name: ms of each round}, {name: the allocator's driver calls during its rounds}): every fn of `runs` timed in
    turn (triton.testing.do_bench's median), `rounds` times, interleaved, so that a drift of the machine falls on
    every contender."""
    times = {name: [] for name in runs}
    drivers = {name: 0 for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            before = driver_calls()
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
            drivers[name] += driver_calls() - before
    return times, drivers


def measure(tokens, args, bandwidth, matrix_rate, device, code):
    inputs = make_inputs(tokens)
    default_setting = (forward.STORE_INVERSE, forward.COMMIT_SEGMENT)
    runs = contenders(inputs)
    for name, fn in list(runs.items()):      # compile and autotune before any timing
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - one failing contender must not hide the others
            print(f"T={tokens} {name} failed: {type(error).__name__}: {error}", flush=True)
            del runs[name]
    torch.cuda.synchronize()
    times, drivers = timed_rounds(runs)
    walls = {name: wall_per_call(fn) for name, fn in runs.items() if name.startswith("api/")}
    called = {name: how_called(fn) for name, fn in runs.items() if name.startswith("api/")}
    memory = {name: peak_extra_mb(fn) for name, fn in runs.items() if not name.startswith("entry/")}
    set_design(default_setting)
    median = {name: statistics.median(values) for name, values in times.items()}
    fla_ms, qla_ms = median.get("fla"), median.get("flashqla")
    rows = []
    for config in CONFIGS:
        default_design = design_of(config, default_setting)
        for design, setting in DESIGNS.items():
            name = f"api/{design}/{label(config)}"
            if name not in median:
                continue
            entry = f"entry/{design}/{label(config)}"
            is_default = design == default_design
            from_plan, early = called[name]
            rows.append({
                "T": tokens, "budget": config.budget, "band": config.band, "selector": config.selector,
                "design": design,
                "default_design": is_default,
                "api_ms": median[name], "api_ms_runs": times[name], "api_wall_ms": walls.get(name),
                # cudaMalloc + cudaFree calls while the public call's and its entry's rounds ran (0: none of their
                # host share is the allocator's; do_bench's own cache buffer comes from the allocator's pool)
                "api_driver_calls": drivers[name], "entry_driver_calls": drivers.get(entry),
                "sparsegdn_ms": median.get(entry) if is_default else None,
                "entry_ms": median.get(entry),      # this design's backend entry (sparsegdn_ms: the default's only)
                "fla_ms": fla_ms, "fla_ms_runs": times.get("fla"),
                "flashqla_ms": qla_ms, "flashqla_ms_runs": times.get("flashqla"),
                "speedup_vs_fla": fla_ms / median[name] if fla_ms else None,
                "speedup_vs_flashqla": qla_ms / median[name] if qla_ms else None,
                "peak_mem_mb": memory[name], "fla_peak_mem_mb": memory.get("fla"),
                "flashqla_peak_mem_mb": memory.get("flashqla"),
                "stage_ms": stage_times(inputs, config, setting),
                "minimum_traffic_ms": 1e3 * minimum_traffic_bytes(tokens) / bandwidth,
                "copy_bandwidth_tbs": bandwidth / 1e12, "matmul_tflops": matrix_rate / 1e12,
                "device": device, "date": args.date, "build": code, "output_final_state": True,
                "cuda_graph": graphs.CUDA_GRAPH and tokens <= graphs.MAX_TOKENS,   # the benchmark's B is 1
                # the public call launched from a recorded plan (sparsegdn/triton/call_plans.py), as seen after the timing
                "call_plans": from_plan,
                # the outputs by the Gluon lists beside the chain pass (forward.LISTS_FROM, or the lists design)
                "output_lists": takes_lists(inputs, config, setting), "lists_from": forward.LISTS_FROM,
                # the public call waited for the early checks' flags only, as seen after the timing
                "early_checks": early,
                "command": process_settings() + "FLA_FLASH_QLA=0 python benchmarks/kernel_bench.py "
                + " ".join(sys.argv[1:]),
            })
            r = rows[-1]
            print(f"T={tokens:6d} {config.budget:4} band {config.band} {config.selector:5s} {design:7s} api {r['api_ms']:7.3f} ms  entry {r['entry_ms'] or float('nan'):7.3f}  "
                  f"fla {fla_ms or float('nan'):7.3f} x{r['speedup_vs_fla'] or float('nan'):.2f}  "
                  f"qla {qla_ms or float('nan'):7.3f} x{r['speedup_vs_flashqla'] or float('nan'):.2f}  "
                  f"mem {r['peak_mem_mb']:.0f}/{r['fla_peak_mem_mb'] or float('nan'):.0f} MB  "
                  + " ".join(f"{s}={t:.3f}" for s, t in r["stage_ms"].items()), flush=True)
    set_design(default_setting)
    del inputs, runs
    torch.cuda.empty_cache()
    return rows


def segments_unused(designs) -> str | None:
    """Why this process may not time `designs`, or None: a process started with SPARSEGDN_COMMIT_SEGMENT whose designs
    leave out "process" would time every design's own segments (whole chains for by_band) under a command that names
    the setting (batch 29's first segment runs did); one started with SPARSEGDN_LISTS_SEGMENT whose designs all walk
    whole chains (WHOLE_BESIDE_LISTS) would time none of its segments."""
    commit_segment, lists_segment = PROCESS_SEGMENTS
    if commit_segment and "process" not in designs:
        return (f"SPARSEGDN_COMMIT_SEGMENT={commit_segment} is set, but the designs asked for "
                f"({' '.join(designs)}) set their own segments (by_band: whole chains); add --designs process to "
                "time this process's segments")
    if lists_segment and all(design in WHOLE_BESIDE_LISTS for design in designs):
        return (f"SPARSEGDN_LISTS_SEGMENT={lists_segment} is set, but the designs asked for ({' '.join(designs)}) "
                "walk whole chains; add by_band to time this process's segments beside the lists")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536, 131072])
    parser.add_argument("--out", default="analysis/results")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--render", type=Path, default=None, help="only rewrite the .md of an existing JSON")
    parser.add_argument("--designs", nargs="+", choices=sorted(DESIGNS), default=list(DEFAULT_DESIGNS))
    parser.add_argument("--configs", nargs="+", choices=[label(c) for c in CONFIGS], default=None,
                        help="these SparseGDN configurations only (budget/band/selector; default: all)")
    parser.add_argument("--digest", action="store_true", help="print this checkout's sources digest and exit")
    args = parser.parse_args()
    if args.digest:
        print(sources_digest())
        return
    problem = segments_unused(args.designs)
    if problem:
        raise SystemExit(problem)
    for name in set(DESIGNS) - set(args.designs):
        del DESIGNS[name]
    if args.configs:
        CONFIGS[:] = [config for config in CONFIGS if label(config) in args.configs]
    if args.render:
        write_report(args.render)
        return
    device = torch.cuda.get_device_name()
    bandwidth, matrix_rate = ceilings()
    print(f"{device}: copy {bandwidth / 1e12:.2f} TB/s, bf16 matmul {matrix_rate / 1e12:.0f} TFLOP/s", flush=True)
    rows, code = [], build()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for tokens in args.tokens:       # written after every length, so a run cut short keeps what it measured
        rows += measure(tokens, args, bandwidth, matrix_rate, device, code)
        tuned = autotune_choices()
        for r in rows:
            r["autotune"] = tuned
            r["complete"] = tokens == args.tokens[-1]
        (out / "kernel_bench.json").write_text(json.dumps(rows, indent=1))
    write_report(out / "kernel_bench.json")


def write_report(path: Path) -> None:
    """The run's markdown beside its JSON (analysis/measurements.py, which needs polars)."""
    try:
        from analysis import measurements
    except ImportError as error:
        print(f"{path.with_suffix('.md').name} not written ({error}): run "
              f"python benchmarks/kernel_bench.py --render {path} where polars is installed", flush=True)
        return
    path.with_suffix(".md").write_text(measurements.kernel_report(path))
    print(path.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
