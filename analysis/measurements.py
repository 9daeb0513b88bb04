"""The project's committed measurements (analysis/results/*.json) as tidy polars frames and markdown tables.

The README's result tables (`python -m analysis.front_page` writes them) and the app's Measured
results page both read the files through here, so a new result file flows into both without hand
edits, and every figure they show carries the device, date, command and build of the run behind it.
No Streamlit and no printing here.

Fields read from kernel_bench*.json (one row per sequence length T, configuration and design):
  T, budget, band, selector            the configuration
  design, default_design               which design of the GPU path (Tinv "stored" by the intra-chunk
                                       pass or solved "on_chip" where used) and whether it is the default
  api_ms                               the public sparse_gated_delta_rule call (the figure that counts)
  sparsegdn_ms                         the Triton backend entry alone (kernels only, no checks; default design)
  fla_ms, flashqla_ms                  the other contenders of the same run (null: not measured)
  peak_mem_mb, fla_peak_mem_mb         peak extra GPU memory of the public call and of FLA
  stage_ms                             {stage: ms} of the public call (sparsegdn.STAGES)
  device, date, command, build         where, when and how the run was made, and the code's git commit
  output_final_state                   whether every contender returned the final state
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from sparsegdn import SparseConfig
from .timing import FLA_BACKENDS, first_call_notes

RESULTS_DIR = Path(__file__).resolve().parent / "results"
KERNEL_COLUMNS = {"T": pl.Int64, "budget": pl.Float64, "band": pl.Int64, "selector": pl.Utf8,
                  "design": pl.Utf8, "default_design": pl.Boolean,
                  "api_ms": pl.Float64, "sparsegdn_ms": pl.Float64, "fla_ms": pl.Float64, "flashqla_ms": pl.Float64,
                  "peak_mem_mb": pl.Float64, "fla_peak_mem_mb": pl.Float64,
                  "device": pl.Utf8, "date": pl.Utf8, "command": pl.Utf8, "build": pl.Utf8,
                  "output_final_state": pl.Boolean, "cuda_graph": pl.Boolean, "call_plans": pl.Boolean,
                  "api_wall_ms": pl.Float64, "output_lists": pl.Boolean, "lists_from": pl.Int64,
                  "early_checks": pl.Boolean}
PROVENANCE = ("device", "date", "command", "build")


# ---------------------------------------------------------------------------------- kernel speed

def kernel_bench_files(results_dir: Path = RESULTS_DIR) -> list[Path]:
    """The committed kernel benchmark runs, each file one build and one run."""
    return sorted(results_dir.glob("kernel_bench*.json"))


def kernel_bench(path: Path) -> pl.DataFrame:
    """One row per (T, configuration) of a kernel_bench JSON, with each contender's time over ours:
    public_vs_fla = fla_ms / api_ms (above 1: the public call is faster), public_vs_flashqla, and
    kernels_vs_fla = fla_ms / sparsegdn_ms (the backend entry alone, not the contract's figure)."""
    rows = [{**{name: row.get(name) for name in KERNEL_COLUMNS}, **_spread(row.get("api_ms_runs"))}
            for row in json.loads(Path(path).read_text())]
    frame = pl.DataFrame(rows, schema={**KERNEL_COLUMNS, **SPREAD_COLUMNS})
    return frame.with_columns((pl.col("fla_ms") / pl.col("api_ms")).alias("public_vs_fla"),
                              (pl.col("flashqla_ms") / pl.col("api_ms")).alias("public_vs_flashqla"),
                              (pl.col("fla_ms") / pl.col("sparsegdn_ms")).alias("kernels_vs_fla"))


# The spread of the public call's timed rounds (do_bench medians, interleaved with the other contenders): its host
# work after each call's sync moves it between rounds and processes (kernel_bench.notes.md, 2026-12-02).
SPREAD_COLUMNS = {"api_ms_low": pl.Float64, "api_ms_high": pl.Float64, "api_rounds": pl.Int64}


def _spread(runs) -> dict:
    """Lowest and highest of a row's timed rounds of the public call, and how many there were (None without)."""
    if not runs:
        return {"api_ms_low": None, "api_ms_high": None, "api_rounds": None}
    return {"api_ms_low": min(runs), "api_ms_high": max(runs), "api_rounds": len(runs)}


def provenance(frame: pl.DataFrame) -> dict[str, str]:
    """Device, date, command and build of a run's rows ("not recorded" where the file has none)."""
    out = {}
    for name in PROVENANCE:
        values = frame[name].drop_nulls().unique(maintain_order=True).to_list() if name in frame.columns else []
        out[name] = "; ".join(values) if values else "not recorded"
    return out


def _ms(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _versus(ratio) -> str:
    """Another contender's time over ours: above 1 we are faster, below 1 slower (said in words)."""
    if ratio is None:
        return "–"
    return f"{ratio:.2f} ({'faster' if ratio >= 1 else 'slower'})"


def _final_state(frame: pl.DataFrame) -> str:
    recorded = frame["output_final_state"].drop_nulls()
    if recorded.is_empty():
        return "whether the contenders returned the final state is not recorded in the file"
    return "every contender returned the final state" if recorded.all() else "the final state was not returned"


def kernel_rows(frame: pl.DataFrame, config: SparseConfig = SparseConfig()) -> pl.DataFrame:
    """A kernel benchmark's rows at `config`'s budget, band and selector, of the default design, by length."""
    return frame.filter((pl.col("budget") == config.budget) & (pl.col("band") == config.band)
                        & (pl.col("selector") == config.selector)
                        & pl.col("default_design").fill_null(True)).sort("T")


def flashqla_leads(frame: pl.DataFrame, config: SparseConfig = SparseConfig()) -> list[int]:
    """The lengths at which FlashQLA's call was faster than our public call in kernel_rows(frame, config)."""
    rows = kernel_rows(frame, config)
    return rows.filter(pl.col("public_vs_flashqla").is_not_null() & (pl.col("public_vs_flashqla") < 1.0))["T"].to_list()


def flashqla_standing(frame: pl.DataFrame | None, config: SparseConfig = SparseConfig()) -> str:
    """Where FlashQLA stands against our public call at `config` in a kernel benchmark's rows, in words for the
    Results page: the lengths where it leads, none, or that the run did not measure it."""
    if frame is None or frame["public_vs_flashqla"].is_null().all():
        return "the last table above did not measure FlashQLA"
    leads = flashqla_leads(frame, config)
    if leads:
        return (f"at budget {config.budget:g} in the last table above it leads our public call at "
                f"{lengths_in_words(leads)}")
    return (f"at budget {config.budget:g} in the last table above our public call is ahead of it at every length "
            f"measured")


def lengths_in_words(lengths: list[int]) -> str:
    """Token counts as a reader says them (_tokens): [8192, 32768, 65536] -> "8K, 32K and 64K"."""
    words = [_tokens(t) for t in lengths]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def kernel_table(frame: pl.DataFrame, name: str, config: SparseConfig = SparseConfig()) -> str:
    """The README's kernel table of one run: the public call against every contender measured, at
    `config`'s budget, band and selector, with where, when and how the run was made."""
    where = provenance(frame)
    rows = kernel_rows(frame, config)
    with_qla = rows["flashqla_ms"].is_not_null().any()
    lines = [f"`{name}`: {where['device']}, {where['date']}, build {where['build']}; `{where['command']}`.",
             f"Budget {config.budget:g}, band {config.band}, `{config.selector}` selector, selection inside the "
             f"timed call; {_final_state(frame)}."
             + ("" if with_qla else " FlashQLA was not measured in this run."), "",
             "| T | SparseGDN public call ms (lowest-highest round) | kernels only ms | FLA ms | FLA / public call"
             + (" | FlashQLA ms | FlashQLA / public call" if with_qla else "") + " | peak extra MB, ours / FLA |",
             "|---|---|---|---|---" + ("|---|---" if with_qla else "") + "|---|"]
    for row in rows.iter_rows(named=True):
        qla = f" | {_ms(row['flashqla_ms'])} | {_versus(row['public_vs_flashqla'])}" if with_qla else ""
        lines.append(f"| {_tokens(row['T'])} | {_ms(row['api_ms'])}{_range(row)} | {_ms(row['sparsegdn_ms'])} | "
                     f"{_ms(row['fla_ms'])} "
                     f"| {_versus(row['public_vs_fla'])}{qla} | {_ms(row['peak_mem_mb'], 0)} / "
                     f"{_ms(row['fla_peak_mem_mb'], 0)} |")
    design = rows["design"].drop_nulls().unique().to_list()
    others = frame["design"].drop_nulls().unique().len() > 1 if "design" in frame.columns else False
    rounds = rows["api_rounds"].drop_nulls().unique().to_list()
    walls = rows["api_wall_ms"].drop_nulls().len() > 0
    lines += ["", (f"The public call's figure is the median of {_count_words(rounds)} timed rounds, interleaved with "
                   "the other contenders, its lowest and highest in brackets"
                   + ("; back to back, a call took " + ", ".join(
                       f"{_ms(r['api_wall_ms'])} ms at {_tokens(r['T'])}" for r in rows.iter_rows(named=True)
                       if r["api_wall_ms"] is not None) + " of wall time" if walls else "")
                   + ". The call's host work after each sync moves it between rounds and between processes "
                   "(kernel_bench.notes.md).")
              if rounds else "", "`FLA / public call` is FLA's time over the public `sparse_gated_delta_rule` call's (checks "
              "included): above 1 the public call is faster. `kernels only` times the Triton backend entry "
              "without the call's checks; it is not the figure that counts."
              + (f" Design of the GPU path: Tinv {design[0].replace('_', ' ')} (that build's default"
                 + ("; the other design's rows are in the file)." if others else ", the only design run).")
                 if design else "")
              + _graphed(rows)]
    return "\n".join(lines)


def _range(row: dict) -> str:
    """(lowest-highest) of the public call's timed rounds, or nothing where the file has no rounds."""
    if row.get("api_ms_low") is None:
        return ""
    return f" ({_ms(row['api_ms_low'])}-{_ms(row['api_ms_high'])})"


def _count_words(counts: list) -> str:
    """'2' or '2-5': how many timed rounds the rows have."""
    return str(counts[0]) if len(counts) == 1 else f"{min(counts)}-{max(counts)}"


def _graphed(rows: pl.DataFrame) -> str:
    """Which rows' calls were replayed from a CUDA graph (sparsegdn/triton/graphs.py), when the file says."""
    graphed = rows.filter(pl.col("cuda_graph").fill_null(False))["T"].unique(maintain_order=True).to_list()
    planned = rows.filter(pl.col("call_plans").fill_null(False))
    note = ""
    if graphed:
        note += (f" At {', '.join(_tokens(t) for t in graphed)} both the public call and the kernels-only entry were "
                 "replayed from a CUDA graph (inputs copied in, outputs copied out: the copies are in both figures).")
    if planned.height:
        lengths = planned["T"].unique(maintain_order=True).to_list()
        where = ("every length" if len(lengths) == rows["T"].n_unique()
                 else ", ".join(_tokens(t) for t in lengths))
        launched = sorted(rows.filter(pl.col("call_plans") == False)["selector"].unique().to_list())  # noqa: E712
        note += (f" At {where} the calls were launched from the plan an earlier call of their key recorded "
                 "(sparsegdn/triton/call_plans.py: the host's work done once, the tensors read in place)"
                 + (f"; the {', '.join(f'`{s}`' for s in launched)} rows' calls were launched through Python "
                    "(that build did not plan them)." if launched else "."))
    return note + _lists(rows) + _early(rows)


def _early(rows: pl.DataFrame) -> str:
    """Which of the default design's public calls waited for the early checks' flags only (each configuration at
    which lengths, or every call), when the file says."""
    default = rows.filter(pl.col("default_design").fill_null(True))
    early = default.filter(pl.col("early_checks").fill_null(False))
    if not early.height:
        return ""
    where = "every length and configuration" if early.height == default.height else _configurations_at(early)
    return (f" At {where} the default design's public call waited for the early checks' flags only "
            "(forward.EARLY_CHECKS: a scan of q and the initial state, then pass 1's checks of k, v and g) and "
            "returned while the later passes ran, so the next call's host work overlapped them.")


def _configurations_at(rows: pl.DataFrame) -> str:
    """'budget 0.29, band 1, `score` at 16K, 32K; ...': each configuration of `rows` at which lengths."""
    return "; ".join(
        f"budget {budget:g}, band {band}, `{selector}` at "
        + ", ".join(_tokens(t) for t in group["T"].unique(maintain_order=True).to_list())
        for (budget, band, selector), group in rows.group_by(["budget", "band", "selector"], maintain_order=True))


def _lists(rows: pl.DataFrame) -> str:
    """Which of the default design's calls wrote their outputs by the Gluon lists beside the chain pass (each
    configuration at which lengths), when the file says."""
    default = rows.filter(pl.col("default_design").fill_null(True))
    lists = default.filter(pl.col("output_lists").fill_null(False))
    if not lists.height:
        return ""
    threshold = lists["lists_from"].drop_nulls().unique().to_list()
    return (" The default design's calls wrote their outputs by the Gluon lists beside the chain pass "
            f"(sparsegdn/triton/list_output.py) for {_configurations_at(lists)}"
            + (f" (forward.LISTS_FROM {threshold[0]:,} head chunks and the conditions beside it in that build)"
               if len(threshold) == 1 else "")
            + "; every other call by the one launch of the chains and the outputs. Those calls' stage times are "
            "the stage hook's serialized passes: the lists' overlap with the chains is not in them.")


def kernel_report(path: Path) -> str:
    """The whole run of a kernel_bench JSON as markdown (its .md beside it): every configuration, the
    public call and the kernels alone against each contender, stage times and the roofline gap."""
    rows = json.loads(Path(path).read_text())
    frame = kernel_bench(path)
    where = provenance(frame)
    first = rows[0]
    stages = list(dict.fromkeys(name for row in rows for name in (row.get("stage_ms") or {})))
    rounds = sorted({len(row["api_ms_runs"]) for row in rows if row.get("api_ms_runs")}) or [2]
    lines = [f"# SparseGDN kernel benchmark: `{Path(path).name}`", "",
             f"{where['device']}, {where['date']}, build {where['build']}; B=1, H=16, HV=32, K=V=128, bf16 q/k/v/beta, "
             f"float32 g; do_bench medians, contenders interleaved, each measured in {_count_words(rounds)} rounds "
             f"({'the mean of the two' if rounds == [2] else 'their median'}); "
             f"{_final_state(frame)}.",
             f"Command: `{where['command']}`. Ceilings measured in the same run: copy "
             f"{first['copy_bandwidth_tbs']:.2f} TB/s, bf16 matmul {first['matmul_tflops']:.0f} TFLOP/s.", "",
             "`public` is the sparse_gated_delta_rule call (checks included: the figure that counts); `kernels` the "
             "Triton backend entry alone. `FLA / x`: FLA's time over x's, above 1 x is faster. Stage times are "
             f"CUDA events at the stage hook ({' / '.join(stages)}); the traffic floor is the operator's minimum "
             "traffic (q, k, v, g, beta read once, o and the final state written once) over the measured copy "
             "bandwidth." + _graphed(frame), "",
             "| T | budget | band | selector | design | public ms | kernels ms | FLA ms | FlashQLA ms | FLA / public "
             "| FlashQLA / public | FLA / kernels | peak MB, public / FLA | stages ms | traffic floor ms | public / floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row, derived in zip(rows, frame.iter_rows(named=True)):
        times = " / ".join(f"{(row.get('stage_ms') or {}).get(name, 0):.3f}" for name in stages) or "–"
        floor = row.get("minimum_traffic_ms")
        gap = f"{row['api_ms'] / floor:.1f}x" if floor else "–"
        lines.append(
            f"| {row['T']} | {row['budget']} | {row['band']} | {row['selector']} | {derived['design'] or '–'} "
            f"| {_ms(derived['api_ms'])} "
            f"| {_ms(derived['sparsegdn_ms'])} | {_ms(derived['fla_ms'])} | {_ms(derived['flashqla_ms'])} "
            f"| {_versus(derived['public_vs_fla'])} | {_versus(derived['public_vs_flashqla'])} "
            f"| {_versus(derived['kernels_vs_fla'])} | {_ms(derived['peak_mem_mb'], 0)} / "
            f"{_ms(derived['fla_peak_mem_mb'], 0)} | {times} | {_ms(floor)} | {gap} |")
    lines += ["", f"Autotuner choices: {first.get('autotune')}", ""]
    return "\n".join(lines)


def _tokens(count: int) -> str:
    return f"{count // 1024}K" if count % 1024 == 0 else str(count)


# ---------------------------------------------------------------------------------- whole prefill

def prefill(path: Path) -> tuple[dict, pl.DataFrame]:
    """(meta, one row per tokens x core) of a prefill benchmark JSON (analysis/bench_prefill.py)."""
    data = json.loads(Path(path).read_text())
    columns = {"tokens": pl.Int64, "core": pl.Utf8, "error": pl.Utf8, "prefill_ms_median": pl.Float64,
               "core_ms_median": pl.Float64, "prefill_vs_dense": pl.Float64, "core_vs_dense": pl.Float64,
               "peak_mem_gib": pl.Float64}
    rows = [{name: row.get(name) for name in columns} for row in data["runs"]]
    return data["meta"], pl.DataFrame(rows, schema=columns)


def cp_study(path: Path) -> tuple[dict, pl.DataFrame]:
    """(meta, one row per tokens x contender) of benchmarks/flashqla_cp_study.py's JSON."""
    data = json.loads(Path(path).read_text())
    columns = {"tokens": pl.Int64, "contender": pl.Utf8, "ms": pl.Float64, "output_rel_err": pl.Float64,
               "output_max_abs_err": pl.Float64, "state_rel_err": pl.Float64}
    rows = [{"tokens": int(tokens), "contender": name, **{key: row[key] for key in list(columns)[2:]}}
            for tokens, contenders in data["rows"].items() for name, row in contenders.items()]
    meta = {key: value for key, value in data.items() if key != "rows"}
    return meta, pl.DataFrame(rows, schema=columns)


CP_CONTENDERS = {
    "fla": "FLA 0.6.0, native kernels",
    "flashqla_cp_on": "FlashQLA 0.1.3, auto_cp=True (segments joined by decay)",
    "flashqla_cp_off": "FlashQLA 0.1.3, auto_cp=False (every chunk in order)",
    "sparsegdn_dense_semantics": "our public call, budget 1, band 3, `all`",
}


def cp_study_table(meta: dict, frame: pl.DataFrame, name: str) -> str:
    """The README's table of FlashQLA with and without its context parallelism."""
    lines = [f"`{name}`: {meta['device']}, torch {meta['torch']}, sources {meta['sources']}, {meta['date']}; "
             f"`{meta['command']}`. B=1, H=16, HV=32, K=V=128, bf16 (kernel_bench.py's inputs); errors against the "
             "float32 torch core (dense semantics, the inputs in float32).", "",
             "| T | contender | ms | output rel err | output max abs err | final state rel err |",
             "|---|---|---|---|---|---|"]
    for row in frame.iter_rows(named=True):
        lines.append(f"| {_tokens(row['tokens'])} | {CP_CONTENDERS.get(row['contender'], row['contender'])} | "
                     f"{row['ms']:.3f} | {row['output_rel_err']:.2e} | {row['output_max_abs_err']:.2e} | "
                     f"{row['state_rel_err']:.2e} |")
    return "\n".join(lines)


CORE_MEANINGS = {
    "dense-": "sparsegdn.dense_gated_delta_rule with the backend named after the dash (input checks included)",
    "sparse-": "sparsegdn.sparse_gated_delta_rule with the backend named after the dash, at the budget after @",
    "zero": "a core that returns zeros: the prefill without a GDN core (the floor)",
    "transformers": "transformers' own call of its installed core (FLA), unpatched, without sparsegdn's checks",
}


def prefill_table(meta: dict, frame: pl.DataFrame, name: str) -> str:
    """The README's whole-prefill table: every core measured, with the run's provenance."""
    lines = [f"`{name}`: {meta['model']}, {meta['device']}, {meta['dtype']}, torch {meta['torch']}, transformers "
             f"{meta['transformers']}, fla {meta.get('fla')}{FLA_BACKENDS.get(meta.get('fla_backend'), '')}, {meta['date']}; "
             f"`{meta['command']}`. Median of "
             f"{meta['repeats']} interleaved runs after {meta['warmup']} warm-up run(s); SparseGDN budget "
             f"{meta['budget']}, selector {meta['selector']}, band {meta['band']}."
             + (f" Prefilled in segments of {meta['segment_tokens']} tokens, the cache carried from one to the next."
                if meta.get("segment_tokens") else ""), "",
             "| tokens | GDN core | prefill ms | prefill vs dense | GDN core ms (all layers) | core vs dense | peak GiB |",
             "|---|---|---|---|---|---|---|"]
    for row in frame.iter_rows(named=True):
        if row["error"]:
            lines.append(f"| {row['tokens']} | {row['core']} | failed: {row['error'][:60]} | | | | |")
            continue
        lines.append(f"| {row['tokens']} | {row['core']} | {row['prefill_ms_median']:.1f} | "
                     f"{_ms(row['prefill_vs_dense'])} | {row['core_ms_median']:.1f} | {_ms(row['core_vs_dense'])} | "
                     f"{_ms(row['peak_mem_gib'], 2)} |")
    done = frame.filter(pl.col("error").is_null())
    for tokens, part in done.group_by("tokens", maintain_order=True):
        fastest = part.filter(pl.col("core") != "zero").sort("core_ms_median").row(0, named=True)
        by_core = {row["core"]: row for row in part.iter_rows(named=True)}
        dense = next((row for core, row in by_core.items() if core.startswith("dense-")), None)
        line = f"At {tokens[0]} tokens the fastest GDN core was `{fastest['core']}` ({fastest['core_ms_median']:.1f} ms)."
        if dense and "zero" in by_core:
            share = 1 - by_core["zero"]["prefill_ms_median"] / dense["prefill_ms_median"]
            line += (f" The `zero` prefill is {share:.0%} shorter than `{dense['core']}`'s: the most that any GDN core "
                     "could save end to end.")
        lines += ["", line]
    used = {prefix for prefix in CORE_MEANINGS for core in done["core"].to_list() if core.startswith(prefix)}
    lines += ["", "Cores: " + "; ".join(f"`{prefix}{'…' if prefix.endswith('-') else ''}` "
                                        f"{meaning}" for prefix, meaning in CORE_MEANINGS.items() if prefix in used) + "."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- selector error

def selector_errors(path: Path) -> tuple[dict, pl.DataFrame]:
    """(meta, mean relative errors of o and of the final state per inputs family, band and selector)."""
    data = json.loads(Path(path).read_text())
    rows = pl.DataFrame(data["rows"])
    means = (rows.group_by("family", "band", "selector", maintain_order=True)
             .agg(pl.col("rel_err_o").mean(), pl.col("rel_err_state").mean(), pl.len().alias("seeds")))
    return data["meta"], means


def selector_table(meta: dict, means: pl.DataFrame, name: str) -> str:
    """The README's selector table: the output error (and the final state's) of every selector measured."""
    selectors = means["selector"].unique(maintain_order=True).to_list()
    shape = meta["shape"]
    lines = [f"`{name}`: {meta['device']}, {meta['date']}; `{meta['command']}`. Relative L2 error of o versus the "
             f"dense operator (final state's in brackets), mean over {means['seeds'].max()} seeds; B={shape['B']} "
             f"T={shape['T']} H={shape['H']} HV={shape['HV']} K={shape['K']} V={shape['V']}. Lower is better.", "",
             "| inputs | band | " + " | ".join(selectors) + " |", "|---|---|" + "---|" * len(selectors)]
    for (family, band), part in means.group_by("family", "band", maintain_order=True):
        cells = {row["selector"]: f"{row['rel_err_o']:.3f} ({row['rel_err_state']:.2f})"
                 for row in part.iter_rows(named=True)}
        lines.append(f"| {family} | {band} | " + " | ".join(cells.get(s, "–") for s in selectors) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- model evaluation

Z95 = 1.96                  # the normal quantile of the accuracy means' 95% intervals
PERPLEXITY_TARGET = 3.0     # the default model's target: sparse perplexity within 3% of dense
TARGET_LENGTHS = (4096, 8192)


def ruler(path: Path) -> tuple[dict, pl.DataFrame]:
    """(provenance of the evaluation, its records as one tidy table; see ruler_report.records_frame).
    The provenance: model, device, date, command, checkpoint (sha256, 16 digits), samples (per task, by
    length; {} when not recorded), ppl_length, merged (the later runs merged in by analysis/ruler_merge.py:
    each one's device, date and command; [] when none)."""
    from .ruler_report import records_frame

    data = json.loads(Path(path).read_text())
    meta = {key: data.get(key, "not recorded") for key in ("model", "device", "date", "command", "ppl_length")}
    meta["checkpoint"] = data.get("checkpoint_sha256", "not recorded")[:16]
    meta["samples"] = {int(length): count for length, count in data.get("samples", {}).items()}
    meta["merged"] = [{key: run.get(key, "not recorded") for key in ("device", "date", "command")}
                      for run in data.get("merged", [])]
    return meta, records_frame(path)


def perplexity_change(ruler_frame: pl.DataFrame) -> pl.DataFrame:
    """Per sparse configuration and held-out source: perplexity change against dense, in percent."""
    ppl = ruler_frame.filter(pl.col("kind") == "perplexity")
    dense = ppl.filter(pl.col("config") == "dense").select("source", pl.col("perplexity").alias("dense"))
    return (ppl.filter(pl.col("config") != "dense").join(dense, on="source")
            .with_columns((100 * (pl.col("perplexity") / pl.col("dense") - 1)).alias("change_pct"))
            .select("budget", "selector", "band", "source", "perplexity", "dense", "change_pct")
            .sort("band", "selector", "budget", "source"))


def ruler_rows(ruler_frame: pl.DataFrame) -> pl.DataFrame:
    """The accuracy records, dense's given budget 1, selector 'dense' and band 3 (the exact operator)."""
    return (ruler_frame.filter(pl.col("kind") == "ruler")
            .with_columns(pl.col("budget").fill_null(1.0), pl.col("selector").fill_null("dense"),
                          pl.col("band").fill_null(3)))


def ruler_accuracy(ruler_frame: pl.DataFrame) -> pl.DataFrame:
    """Mean accuracy over tasks per configuration and length (dense has budget 1 and selector 'dense'),
    with its 95% interval: a normal approximation over the samples (each task's sample variance over its
    sample count, summed, the root over the number of tasks). `samples`: all tasks' together."""
    se = (pl.col("sample_var") / pl.col("samples")).sum().sqrt() / pl.len()
    return (ruler_rows(ruler_frame)
            .group_by("config", "budget", "selector", "band", "length")
            .agg(pl.col("accuracy").mean().alias("accuracy"), se.alias("se"), pl.col("samples").sum().alias("samples"),
                 pl.len().alias("tasks"))
            .with_columns((pl.col("accuracy") - Z95 * pl.col("se")).clip(0.0, 1.0).alias("ci_low"),
                          (pl.col("accuracy") + Z95 * pl.col("se")).clip(0.0, 1.0).alias("ci_high"))
            .drop("se").sort("length", "band", "selector", "budget"))


def _with_interval(row: dict | None, digits: int = 3) -> str:
    if row is None:
        return "not measured"
    return f"{row['accuracy']:.{digits}f} [{row['ci_low']:.2f}-{row['ci_high']:.2f}]"


def _one(frame: pl.DataFrame, **where) -> dict | None:
    """The one row of `frame` whose columns equal `where`'s values, or None."""
    part = frame.filter(*[pl.col(name) == value for name, value in where.items()])
    return None if part.is_empty() else part.row(0, named=True)


def ruler_targets(ruler_frame: pl.DataFrame, config: SparseConfig = SparseConfig()) -> pl.DataFrame:
    """The default model's targets: target, measured (95% intervals in brackets) and met ('yes', 'no' or
    'not measured'). Accuracies are means over the five tasks unless a task is named; sparse settings at
    `config`'s band; the budgets are `config`'s and 0.15."""
    rows, accuracy = ruler_rows(ruler_frame), ruler_accuracy(ruler_frame)
    out = []

    def add(target: str, measured: str, met: bool | None) -> None:
        out.append({"target": target, "measured": measured,
                    "met": "not measured" if met is None else ("yes" if met else "no")})

    def mean(selector: str, length: int, budget: float = 1.0) -> dict | None:
        if selector == "dense":
            return _one(accuracy, selector="dense", length=length)
        return _one(accuracy, selector=selector, length=length, budget=budget, band=config.band)

    for length in TARGET_LENGTHS:
        single = _one(rows, selector="dense", length=length, task="niah_single")
        add(f"dense niah_single at {_tokens(length)} >= 0.90",
            "not measured" if single is None else f"{_with_interval(single)}, {single['samples']} samples",
            None if single is None else single["accuracy"] >= 0.9)
    dense = mean("dense", TARGET_LENGTHS[0])
    add(f"dense mean over the five tasks at {_tokens(TARGET_LENGTHS[0])} >= 0.60", _with_interval(dense),
        None if dense is None else dense["accuracy"] >= 0.6)
    for length in TARGET_LENGTHS:
        dense, score = mean("dense", length), mean("score", length, config.budget)
        ratio = score["accuracy"] / dense["accuracy"] if score and dense and dense["accuracy"] else None
        add(f"score (b={config.budget:g}, band {config.band}) >= 95% of dense at {_tokens(length)}",
            "not measured" if ratio is None else f"{ratio:.3f} ({score['accuracy']:.3f} against {dense['accuracy']:.3f})",
            None if ratio is None else ratio >= 0.95)
        for budget in (config.budget, 0.15):
            s, u, r = (mean(selector, length, budget) for selector in ("score", "uniform", "random"))
            margin = 0.10 if budget == 0.15 and dense is not None and dense["accuracy"] >= 0.9 else 0.0
            met = None if None in (s, u, r) else (
                s["accuracy"] - max(u["accuracy"], r["accuracy"]) >= margin if margin
                else s["accuracy"] > max(u["accuracy"], r["accuracy"]))
            add(f"score above uniform and random at b={budget:g}, {_tokens(length)}"
                + (" (by >= 0.10: dense >= 0.90)" if margin else ""),
                f"{_with_interval(s)} against {_with_interval(u)} / {_with_interval(r)}", met)
    change = perplexity_change(ruler_frame)
    dense_ppl = ruler_frame.filter((pl.col("kind") == "perplexity") & (pl.col("config") == "dense"))
    for source in sorted(dense_ppl["source"].to_list()):
        row = _one(change, selector="score", budget=config.budget, band=config.band, source=source)
        add(f"perplexity with score (b={config.budget:g}) within {PERPLEXITY_TARGET:g}% of dense ({source})",
            "not measured" if row is None else
            f"{row['dense']:.2f} -> {row['perplexity']:.2f} ({row['change_pct']:+.2f}%)",
            None if row is None else abs(row["change_pct"]) <= PERPLEXITY_TARGET)
    return pl.DataFrame(out, schema={"target": pl.Utf8, "measured": pl.Utf8, "met": pl.Utf8})


def targets_table(targets: pl.DataFrame) -> list[str]:
    """ruler_targets as markdown lines."""
    return ["| target | measured | met |", "|---|---|---|"] + [
        f"| {row['target']} | {row['measured']} | {row['met']} |" for row in targets.iter_rows(named=True)]


def not_measured(ruler_frame: pl.DataFrame, lengths=()) -> dict[int, pl.DataFrame]:
    """Per length (those given, and every length with records), the settings the file measured at some
    length but not at this one: config, budget, selector, band."""
    accuracy = ruler_accuracy(ruler_frame)
    settings = accuracy.select("config", "budget", "selector", "band").unique(maintain_order=True)
    out = {}
    for length in sorted(set(lengths) | set(accuracy["length"].to_list())):
        missing = settings.join(accuracy.filter(pl.col("length") == length).select("config"), on="config", how="anti")
        if missing.height:
            out[length] = missing.sort("band", "budget", "selector", descending=[False, True, False])
    return out


def not_measured_text(ruler_frame: pl.DataFrame, lengths=()) -> list[str]:
    """not_measured in words, one line per length: by band, each budget's selectors."""
    lines = []
    for length, missing in not_measured(ruler_frame, lengths).items():
        bands = []
        for (band,), part in missing.group_by("band", maintain_order=True):
            budgets = [f"b={budget:g} " + "/".join(selectors["selector"].to_list())
                       for (budget,), selectors in part.group_by("budget", maintain_order=True)]
            bands.append(f"band {band}: " + ", ".join(budgets))
        lines.append(f"- {_tokens(length)}: " + "; ".join(bands) + f" ({missing.height} settings)")
    return lines


def selector_accuracy_table(ruler_frame: pl.DataFrame, *, band: int, budgets=(0.29, 0.15)) -> str:
    """RULER accuracy of dense and every selector at `budgets` and `band`, per length: the mean over the
    five tasks and `niah_single`, each with its 95% interval, and the samples per task in brackets."""
    rows = ruler_rows(ruler_frame)
    keep = (pl.col("selector") == "dense") | ((pl.col("band") == band) & pl.col("budget").is_in(list(budgets)))
    accuracy, rows = ruler_accuracy(ruler_frame).filter(keep), rows.filter(keep)
    lengths = sorted(accuracy["length"].unique().to_list())
    lines = [f"RULER accuracy, band {band}: mean over the five tasks / `niah_single`, 95% intervals in square "
             "brackets, samples per task in round ones:", "",
             "| config | " + " | ".join(_tokens(n) for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
    for config in accuracy.sort("budget", "selector", descending=[True, False])["config"].unique(maintain_order=True):
        cells = []
        for length in lengths:
            mean = _one(accuracy, config=config, length=length)
            single = _one(rows, config=config, length=length, task="niah_single")
            if mean is None:
                cells.append("not measured")
            elif single is None:     # an evaluation without the single-needle task: the mean alone
                cells.append(f"{_with_interval(mean, 2)} ({mean['samples'] // mean['tasks']})")
            else:
                cells.append(f"{_with_interval(mean, 2)} / {_with_interval(single, 2)} ({single['samples']})")
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


DEFAULT_TRAIN_LOG = Path(__file__).resolve().parents[1] / "data" / "default-model" / "train_log.json"


def trained_length(train_log: dict | Path = DEFAULT_TRAIN_LOG) -> int | None:
    """The longest sequence a training run's curriculum reached (a train_log.json, or its path), or None."""
    if isinstance(train_log, Path):
        if not train_log.is_file():
            return None
        train_log = json.loads(train_log.read_text())
    curriculum = (train_log.get("recipe") or train_log).get("curriculum")
    return max(length for _, length in curriculum) if curriculum else None


def length_text(ruler_frame: pl.DataFrame, trained: int | None = None) -> str:
    """Dense accuracy against length, in words, and whether the model holds it past `trained` tokens (the
    longest it trained on): where dense falls below half its value at the shortest length, it does not
    extrapolate, and the sparse rows there say little about the selectors."""
    dense = {row["length"]: row for row in ruler_accuracy(ruler_frame).filter(pl.col("selector") == "dense")
             .iter_rows(named=True)}
    if not dense:
        return "Dense accuracy was not measured."
    text = ("Dense accuracy (mean over the five tasks) by length: "
            + ", ".join(f"{_tokens(n)} {_with_interval(row)}" for n, row in sorted(dense.items())) + ".")
    if trained:
        beyond = {n: row for n, row in dense.items() if n > trained}
        text += f" The model was trained on sequences of up to {trained:,} tokens."
        lost = [n for n, row in sorted(beyond.items()) if row["accuracy"] < dense[min(dense)]["accuracy"] / 2]
        if lost:
            text += (f" It does not extrapolate to {', '.join(_tokens(n) for n in lost)}: dense accuracy there is less "
                     "than half its value at the shortest length, so the sparse rows at that length compare settings "
                     "of a model that has mostly stopped retrieving, and say little about the selectors.")
        elif beyond:
            text += " Past that length dense accuracy keeps at least half its value at the shortest length."
    return text


def window_counts(frame: pl.DataFrame) -> str:
    """How many held-out windows each source's perplexity was read on: one count where every source had the same,
    else each source's ("50 (milton) / 24 (pydoc-howto)"); "?" where the file records none."""
    rows = (frame.filter((pl.col("kind") == "perplexity") & pl.col("windows").is_not_null())
            .group_by("source").agg(pl.col("windows").max()).sort("source"))
    if rows.height == 0:
        return "?"
    if rows["windows"].n_unique() == 1:
        return str(rows["windows"][0])
    return " / ".join(f"{count} ({source})" for source, count in rows.iter_rows())


def evaluation_table(path: Path, name: str, config: SparseConfig = SparseConfig(),
                     trained_log: Path | None = None) -> str:
    """The README's block of a RULER-style evaluation: provenance, the targets met and missed, dense accuracy
    by length (against the longest length of `trained_log`'s curriculum, the evaluated model's training
    log), accuracy per length with intervals and sample counts, held-out perplexity at `config`'s budget and
    band, and the settings the file did not measure."""
    meta, frame = ruler(path)
    counts = meta["samples"]
    windows = window_counts(frame)
    samples = ("samples per task: " + ", ".join(f"{count} at {_tokens(length)}" for length, count in sorted(counts.items()))
               if counts else "samples per task: in the table")
    change = perplexity_change(frame).filter((pl.col("budget") == config.budget) & (pl.col("band") == config.band))
    lines = [f"`{name}`: {meta['model']}, {meta['device']}, {meta['date']}, checkpoint sha256 {meta['checkpoint']}; "
             f"`{meta['command']}`. {samples[0].upper() + samples[1:]}; held-out perplexity on "
             f"{windows} windows of {meta['ppl_length']} tokens per source. 95% "
             "intervals in square brackets: Wilson for one task, a normal approximation over the samples for the "
             "mean over the five tasks.", "", "Targets:", ""]
    lines += targets_table(ruler_targets(frame, config))
    lines += ["", length_text(frame, trained_length(trained_log) if trained_log else None)]
    lines += ["", selector_accuracy_table(frame, band=config.band), "",
              f"Held-out perplexity at budget {config.budget:g}, band {config.band}:", "",
              "| selector | source | dense | sparse | change |", "|---|---|---|---|---|"]
    lines += [f"| {row['selector']} | {row['source']} | {row['dense']:.2f} | {row['perplexity']:.2f} | "
              f"{row['change_pct']:+.2f}% |" for row in change.iter_rows(named=True)]
    missing = not_measured_text(frame, counts)
    if missing:
        lines += ["", "Not measured in this file (settings it measured at other lengths):", ""] + missing
    return "\n".join(lines)


# The evaluation the CPU cross-check (gdn_only_eval_cpu.json) compares with: the H200 evaluation of the same weights,
# the GDN-only pretraining (sha256 188dd93bc2ff), kept under this name since the sparse fine-tune replaced the default
# on 2026-12-02 (ruler.json evaluates the fine-tuned weights, which the CPU has not evaluated).
CROSS_CHECK_REFERENCE = "ruler_gdn_only.json"


def cross_check(path: Path, reference: Path) -> tuple[dict, pl.DataFrame]:
    """Two evaluations of one checkpoint (e.g. the CPU torch backend against the GPU Triton one), compared on
    the samples both ran: (provenance of both, one row per setting and length both measured: samples over all
    tasks, equal per-sample scores, each one's mean over tasks on those samples). Refuses other weights."""
    from .ruler_report import sample_agreement

    other, base = (json.loads(Path(p).read_text()) for p in (path, reference))
    digests = other.get("checkpoint_sha256"), base.get("checkpoint_sha256")
    if None in digests or digests[0] != digests[1]:
        raise ValueError(f"{Path(path).name} and {Path(reference).name} did not evaluate one checkpoint (sha256 "
                         f"{str(digests[0])[:12]} and {str(digests[1])[:12]})")
    keys = ("model", "device", "date", "command", "backend", "cpu_cores", "torch_threads", "ppl_length")
    meta = {"checkpoint": digests[0][:16], **{f"{side}_{key}": data.get(key, "not recorded")
                                               for side, data in (("this", other), ("reference", base)) for key in keys}}
    meta["this_windows"], meta["reference_windows"] = (
        max((r["windows"] for r in data["records"] if r["kind"] == "perplexity"), default=0) for data in (other, base))
    rows = pl.DataFrame(sample_agreement(base, other), schema={
        "config": pl.Utf8, "length": pl.Int64, "samples": pl.Int64, "equal": pl.Int64, "reference_mean": pl.Float64,
        "other_mean": pl.Float64})
    return meta, rows.rename({"other_mean": "mean", "reference_mean": "reference mean"})


def cross_check_table(path: Path, name: str, reference: Path) -> str:
    """The README's block of a cross-check evaluation: where each ran, per setting and length the per-sample
    scores that agree and both means, in all how many agree, and whether the perplexities compare."""
    meta, rows = cross_check(path, reference)
    where = {side: f"{meta[f'{side}_device']}" + (f" ({meta[f'{side}_cpu_cores']} cores, {meta[f'{side}_torch_threads']} "
                                                  "torch thread(s))" if meta[f"{side}_device"] == "cpu" else "")
             + f", {meta[f'{side}_backend']} backend, {meta[f'{side}_date']}" for side in ("this", "reference")}
    lines = [f"`{name}`: {where['this']}; `{meta['this_command']}`. Against `{Path(reference).name}` ({where['reference']}): "
             f"the same checkpoint (sha256 {meta['checkpoint']}) on the same samples (equal seeds; where one ran fewer "
             "samples per task, the smaller run's samples are the first of the larger's).", "",
             "| config | length | samples (all tasks) | per-sample scores equal | mean | reference mean, same samples |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {row['config']} | {_tokens(row['length'])} | {row['samples']} | {row['equal']} | {row['mean']:.3f} | "
              f"{row['reference mean']:.3f} |" for row in rows.iter_rows(named=True)]
    if rows.height:
        total, equal = rows["samples"].sum(), rows["equal"].sum()
        gap = (rows["mean"] - rows["reference mean"]).abs().max()
        lines += ["", f"In all {equal:,} of {total:,} per-sample scores are equal ({equal / total:.1%}); the means differ "
                  f"by at most {gap:.3f}."]
    same_ppl = (meta["this_ppl_length"], meta["this_windows"]) == (meta["reference_ppl_length"], meta["reference_windows"])
    lines += ["", "Perplexity " + ("is measured on the same windows in both." if same_ppl else
              f"is not compared: this run measured {meta['this_windows']} windows of {meta['this_ppl_length']} tokens per "
              f"source, the reference {meta['reference_windows']} of {meta['reference_ppl_length']}.")]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- the CPU core

def _spread_text(spread, digits: int = 1) -> str:
    return f"{spread.median:,.{digits}f} [{spread.low:,.{digits}f}-{spread.high:,.{digits}f}]"


def _verdict(faster, slower) -> str:
    """Whether `faster`'s repeats beat `slower`'s outside the noise (their ranges apart), in words."""
    from .timing import difference

    change = difference(faster, slower)
    ratio = slower.median / faster.median
    if change.distinct:
        return f"{ratio:.2f}x ({'faster' if ratio > 1 else 'slower'})"
    return f"{ratio:.2f}x (within the noise)"


def cpu_core(path: Path) -> tuple[dict, pl.DataFrame]:
    """(meta, one row per shape x T x contender: median, low, high ms) of benchmarks/cpu_core_bench.py's JSON."""
    data = json.loads(Path(path).read_text())
    contenders = [name for name in data["rows"][0] if isinstance(data["rows"][0][name], dict) and "median_ms" in
                  data["rows"][0][name]]
    rows = [{"shape": row["shape"], "T": row["T"], "contender": name, "median": row[name]["median_ms"],
             "low": row[name]["min_ms"], "high": row[name]["max_ms"], "n": len(row[name]["samples_ms"])}
            for row in data["rows"] for name in contenders]
    meta = {key: value for key, value in data.items() if key != "rows"}
    return meta, pl.DataFrame(rows)


def cpu_core_table(meta: dict, frame: pl.DataFrame, name: str) -> str:
    """The README's CPU table: the public torch path, sparse against dense (the same code with every event
    and band 3) and against the reference's dense core; differences inside the noise said as such."""
    from .timing import Spread

    lines = [f"`{name}`: {meta['machine']}, torch {meta['torch']}, {meta['threads']} thread, {meta['date']}; "
             f"`{meta['command']}`. Load average (1 min) {meta['load_before']:.2f} before, {meta['load_after']:.2f} "
             f"after. Median [min-max] of {meta['repeats']} interleaved warm repeats, ms; budget {meta['budget']}, "
             f"band {meta['band']}, score selector; bf16 inputs, float32 compute.", "",
             "| shape | T | sparse, public torch path | dense, same path | sparse vs dense | dense, reference "
             "| sparse vs dense reference |", "|---|---|---|---|---|---|---|"]
    for (shape, tokens), part in frame.group_by("shape", "T", maintain_order=True):
        spreads = {row["contender"]: Spread(row["median"], row["low"], row["high"], row["n"])
                   for row in part.iter_rows(named=True)}
        sparse, dense, reference = spreads["sparse_api"], spreads["dense_api"], spreads["dense_reference"]
        lines.append(f"| {shape} | {tokens} | {_spread_text(sparse)} | {_spread_text(dense)} | "
                     f"{_verdict(sparse, dense)} | {_spread_text(reference)} | {_verdict(sparse, reference)} |")
    lines += ["", "`sparse vs dense`: dense's median time over sparse's (above 1 sparse is faster); said to be within "
              "the noise when the two ranges overlap. Both run `sparsegdn/event_forward.py`; the dense reference is "
              "`sparsegdn/reference.py` with every event, what the CPU path ran before."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- the app's runs

def app_runs(path: Path) -> tuple[dict, pl.DataFrame]:
    """(meta, one row per model) of benchmarks/app_run.py's JSON: the app's own runs and their timings. A
    `note` in the meta (written by hand after the run, e.g. which weights "default" was then) is shown
    with the table."""
    data = json.loads(Path(path).read_text())
    rows = []
    for run in data["runs"]:
        timing = run["timing"]
        rows.append({"model": run["model"], "device_name": run["device_name"], "n_tokens": run["n_tokens"],
                     "n_segments": run["n_segments"], "repeats": timing["repeats"], "threads": timing["threads"],
                     "backend": run["backend"], "dense_backend": run["dense_backend"],
                     **{f"{name}_{field}": timing[name][field] for name in ("prefill_dense", "prefill_sparse",
                                                                           "core_dense", "core_sparse")
                        for field in ("median", "low", "high", "n")},
                     "warm_up_tokens": timing["warm_up"]["tokens"], "warm_up_dense_ms": timing["warm_up"]["dense_ms"],
                     "warm_up_sparse_ms": timing["warm_up"]["sparse_ms"],
                     "warm_up_rounds": timing["warm_up"].get("rounds", 1), "wall_s": run["wall_s"],
                     "top1_agreement": run["top1_agreement"],
                     # None: recorded before timed repeats were watched for first-call work
                     "watched": "first_calls" in timing, "first_call_notes": first_call_notes(timing)})
    return data["meta"], pl.DataFrame(rows)


def app_run_table(meta: dict, frame: pl.DataFrame, name: str) -> str:
    """The README's table of the app's runs: whole prefill and GDN core, dense and sparse, as the app
    measures them (median [min-max] of the repeats after an untimed warm-up)."""
    from .timing import Spread

    lines = [f"`{name}`: {meta['device']} ({meta['machine']}), {meta['date']}, build {meta['build']}; "
             f"`{meta['command']}`. Load average (1 min) {meta['load_before']:.2f} before, {meta['load_after']:.2f} "
             "after. Each row is one run of the app's run page (AppTest): median [min-max] of its interleaved "
             "timing repeats, ms, after an untimed warm-up; budget 0.29, score, band 1."
             + (f" **Note: {meta['note']}**" if meta.get("note") else ""), "",
             "| model | device | tokens | repeats, threads | prefill dense | prefill sparse | sparse vs dense "
             "| GDN core dense | GDN core sparse | sparse vs dense | warm-up (not counted) | whole run s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in frame.iter_rows(named=True):
        spread = {name: Spread(row[f"{name}_median"], row[f"{name}_low"], row[f"{name}_high"], row[f"{name}_n"])
                  for name in ("prefill_dense", "prefill_sparse", "core_dense", "core_sparse")}
        lines.append(
            f"| {row['model']} | {row['device_name']} | {row['n_tokens']:,} | {row['repeats']}, {row['threads']} | "
            f"{_spread_text(spread['prefill_dense'])} | {_spread_text(spread['prefill_sparse'])} | "
            f"{_verdict(spread['prefill_sparse'], spread['prefill_dense'])} | {_spread_text(spread['core_dense'])} | "
            f"{_spread_text(spread['core_sparse'])} | {_verdict(spread['core_sparse'], spread['core_dense'])} | "
            f"{row['warm_up_dense_ms']:,.0f} / {row['warm_up_sparse_ms']:,.0f} ms on {row['warm_up_tokens']:,} tokens"
            f"{f' x {rounds} rounds' if (rounds := row['warm_up_rounds']) > 1 else ''} | "
            f"{row['wall_s']:.0f} |")
    lines += ["", "`sparse vs dense`: dense's median over sparse's (above 1 sparse is faster), within the noise "
              "when the ranges overlap. The whole run includes the untimed analysis pass (events, errors)."]
    watched = [row for row in frame.iter_rows(named=True) if row["watched"]]
    if watched:
        lines += ["", "First-call work inside the timed repeats (Triton compiling or autotuning, "
                      "`analysis.timing.FirstCallWatch`): " + "; ".join(
                          f"{row['model']}: " + (" ".join(row["first_call_notes"]) or "none") for row in watched)
                  + "."]
    return "\n".join(lines)


def per_gpu_core_ms(layers: list[dict]) -> dict:
    """{device: {"dense": ms, "sparse": ms}}: the median core times of each GPU's GDN layers, summed."""
    totals: dict = {}
    for row in layers:
        entry = totals.setdefault(row["device"], {"dense": 0.0, "sparse": 0.0})
        for path in ("dense", "sparse"):
            entry[path] += row[f"core_ms_{path}"] or 0.0
    return totals


def _run_spread(spread: dict | None) -> str:
    if not spread:
        return "-"
    return f"{spread['median']:,.1f} ms [{spread['low']:,.1f}-{spread['high']:,.1f}]"


def _general(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def multi_gpu_report(report: dict) -> str:
    """A multi-GPU run's record (benchmarks/multi_gpu_run.py's JSON) as text: when, on what, the command,
    the per-GPU placement and core times, the whole-run timings with their spread, the model-level metrics."""
    from analysis.placement import layer_ranges

    meta, summary = report["meta"], report["summary"]
    timing = summary.get("timing", {})
    cores = per_gpu_core_ms(report["layers"])
    lines = [
        f"{meta['date']} on {summary['device_name']}; build {meta['build']}; torch {meta['versions']['torch']}, "
        f"transformers {meta['versions']['transformers']}, accelerate {meta['versions']['accelerate']}, "
        f"fla {meta['versions']['fla']}.",
        "",
        f"Command: `{meta['command']}`",
        "",
        ("RANDOM weights (the outputs mean nothing; the shape and the placement are the point). "
         if summary["random_weights"] else "") +
        f"{summary['n_tokens']:,} tokens in {summary['n_segments']} segment(s); budget {summary['budget']}, "
        f"selector {summary['selector']}, band {summary['band']}, sparse backend {summary['backend']}, "
        f"dense core {summary['dense_backend']}; device map `{summary['placement']['device_map']}`; "
        f"model built in {meta['load_s']:.0f} s, whole run {meta['run_s']:.0f} s.",
        "",
        "| GPU | card | layers | GDN layers | weights GiB | peak GiB | of GiB | GDN core dense ms | GDN core sparse ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["placement"]["devices"]:
        core = cores.get(row["device"], {})
        lines.append(f"| {row['device']} | {row['name']} | {layer_ranges(row['layers'])} | {len(row['gdn_layers'])} | "
                     f"{row['weights_gib']:.1f} | {row.get('peak_gib', 0):.1f} | {row.get('total_gib') or 0:.1f} | "
                     f"{core.get('dense', 0):,.1f} | {core.get('sparse', 0):,.1f} |")
    lines += [
        "",
        f"Whole prefill: dense {_run_spread(timing.get('prefill_dense'))}, sparse "
        f"{_run_spread(timing.get('prefill_sparse'))}. GDN core, all layers: dense "
        f"{_run_spread(timing.get('core_dense'))}, sparse {_run_spread(timing.get('core_sparse'))}. "
        f"Median [min-max] of {timing.get('repeats', '?')} interleaved repeats after an untimed warm-up. "
        "Each layer's core is timed on its own GPU's stream; a whole prefill on every GPU's, the longest "
        "span taken (the GPUs of a layer placement run one after the other).",
        "",
        f"Events kept: {summary['events_selected']:,} of {summary['events_total']:,}. KL(dense || sparse) "
        f"{_general(summary['kl_mean'])}, top-1 agreement {_general(summary['top1_agreement'])}, perplexity dense "
        f"{_general(summary['ppl_dense'])} / sparse {_general(summary['ppl_sparse'])}.",
    ]
    return "\n".join(lines)
