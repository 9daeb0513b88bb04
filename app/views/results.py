"""The project's committed measurements: kernel speed and whole prefill on a GPU, selector error, the
default model's evaluation. Each section says which file, device, date, build and command it shows."""
import json

import polars as pl
import streamlit as st

from analysis import measurements
from app import figures, tables
from app.views import common

RESULTS = measurements.RESULTS_DIR

st.title("Measured results")
common.explain("results")
st.caption("What the project measured and committed under analysis/results/. These are not live: the timings "
           "of your own runs are under Prefill timings. Each table is one file, one build and one run.")


def caption(name: str, where: dict) -> None:
    st.caption(f"`{name}` · {where['device']} · {where['date']} · build {where['build']} · `{where['command']}`")


st.subheader("GDN-core speed against FLA")
st.write("The figure that counts is the public `sparse_gated_delta_rule` call's, checks included; "
         "*kernels only* times the Triton backend entry alone. Below 1, FLA is faster.")
files = measurements.kernel_bench_files(RESULTS)
bench = None        # the last file's rows, for the FlashQLA sentence below
if not files:
    st.info("No kernel benchmark committed yet (benchmarks/kernel_bench.py writes it on a GPU).")
for path in files:
    bench = measurements.kernel_bench(path)
    caption(path.name, measurements.provenance(bench))
    if bench["build"].is_null().all():
        st.caption("The file does not record its build; analysis/results/kernel_bench.notes.md says which it was.")
    if bench["flashqla_ms"].is_null().all():
        st.caption("FlashQLA was not measured in this run.")
    st.plotly_chart(figures.kernel_speedup(bench), key=f"results_speedup_{path.stem}")
    st.dataframe(tables.readable(bench.select(
        "T", "budget", "band", "selector", "design", "api_ms", "api_ms_low", "api_ms_high", "api_wall_ms",
        "sparsegdn_ms", "fla_ms", "flashqla_ms", "public_vs_fla",
        "public_vs_flashqla", "kernels_vs_fla", "peak_mem_mb", "fla_peak_mem_mb", "output_lists", "early_checks")),
        hide_index=True)
    if bench["output_lists"].any():
        st.caption("`outputs by the Gluon lists`: the call wrote its outputs by the Gluon lists beside the chain pass "
                   "(sparsegdn/triton/list_output.py), not by the one launch; which calls take them is "
                   "sparsegdn/triton/forward.py's LISTS_FROM and the conditions beside it (lists_by_default) as of "
                   "the run's build.")
    if bench["early_checks"].any():
        st.caption("`waited for the early checks only`: the public call waited for the flags of a scan of q and of "
                   "the first pass (sparsegdn/triton/forward.py's EARLY_CHECKS), not for its last kernel, and "
                   "returned while the later passes ran.")

st.subheader("FlashQLA with and without its context parallelism")
where = measurements.flashqla_standing(bench)
st.write(f"What FlashQLA's context parallelism buys it ({where}): "
         "the same inputs timed with its segments joined by decay (auto_cp=True, what the table above runs) and "
         "walking every chunk in order (auto_cp=False), beside FLA and our dense semantics, each with its error "
         "against the float32 torch core.")
for path in sorted(RESULTS.glob("flashqla_cp_study*.json")):
    meta, rows = measurements.cp_study(path)
    caption(path.name, {"device": meta["device"], "date": meta["date"], "build": f"sources {meta['sources']}",
                        "command": meta["command"]})
    st.dataframe(tables.readable(rows.with_columns(pl.col("contender").replace(measurements.CP_CONTENDERS))),
                 hide_index=True)

st.subheader("Whole prefill")
for path in sorted(RESULTS.glob("prefill_*.json")):
    meta, runs = measurements.prefill(path)
    caption(path.name, {"device": meta["device"], "date": meta["date"], "build": meta.get("build", "not recorded"),
                        "command": meta["command"]})
    if meta.get("fla_backend"):       # FLA 0.6 runs FlashQLA's kernels where FlashQLA is installed
        st.caption(f"`dense-fla` and `transformers`: FLA {meta.get('fla')}"
                   f"{measurements.FLA_BACKENDS.get(meta['fla_backend'], '')}.")
    st.dataframe(tables.readable(runs), hide_index=True)

st.subheader("The GDN core on the CPU")
st.write("The torch backend (sparsegdn/event_forward.py), sparse at budget 0.29 against the same code with every "
         "event (dense) and against the chunked reference; median and range of the repeats, ms.")
for path in sorted(RESULTS.glob("cpu_core_bench*.json")):
    meta, rows = measurements.cpu_core(path)
    caption(path.name, {"device": meta["machine"], "date": meta["date"], "build": meta.get("build", "not recorded"),
                        "command": meta["command"]})
    st.dataframe(tables.readable(rows.pivot(on="contender", index=["shape", "T"], values="median")), hide_index=True)

st.subheader("The app's own runs")
st.write("Runs of this app's run page (benchmarks/app_run.py): whole prefill and GDN core, dense and sparse, as "
         "the Timings page shows them: median of the repeats after an untimed warm-up, ms.")
for path in sorted(RESULTS.glob("app_run*.json")):
    meta, rows = measurements.app_runs(path)
    caption(path.name, {"device": f"{meta['device']} ({meta['machine']})", "date": meta["date"],
                        "build": meta["build"], "command": meta["command"]})
    if meta.get("note"):
        st.warning(f"{path.name}: {meta['note']}")
    st.dataframe(tables.readable(rows.select("model", "device_name", "n_tokens", "repeats", "prefill_dense_median",
                                             "prefill_sparse_median", "core_dense_median", "core_sparse_median",
                                             "wall_s")), hide_index=True)

st.subheader("A model over several GPUs")
st.write("A model larger than one GPU, its layers spread by transformers/accelerate, each GDN layer's core on "
         "its own GPU (benchmarks/multi_gpu_run.py): per GPU, its layers, memory and summed GDN core time.")
for path in sorted(RESULTS.glob("multi_gpu_run*.json")):
    st.markdown(f"`{path.name}`: " + measurements.multi_gpu_report(json.loads(path.read_text(encoding="utf-8"))))

st.subheader("Selector error at equal budget")
selector_file = RESULTS / "selector_eval.json"
if selector_file.is_file():
    meta, means = measurements.selector_errors(selector_file)
    caption(selector_file.name, {**meta, "build": meta.get("build", "not recorded")})
    st.dataframe(tables.readable(means), hide_index=True)

def evaluation(path, key: str) -> None:
    """A RULER-style evaluation file: provenance, the targets met and missed, dense accuracy by length,
    accuracy with intervals and samples, perplexity change per band, and what the file did not measure."""
    meta, records = measurements.ruler(path)
    caption(path.name, {**meta, "build": meta.get("build", "not recorded")})
    samples = ", ".join(f"{count} at {length // 1024}K" for length, count in sorted(meta["samples"].items()))
    st.caption(f"Model {meta['model']} · checkpoint sha256 {meta['checkpoint']}"
               + (f" · samples per task: {samples}" if samples else "") + ".")
    for run in meta["merged"]:
        st.caption(f"Merged into `{path.name}` (analysis/ruler_merge.py): {run['device']} · {run['date']} · "
                   f"`{run['command']}`")
    targets = measurements.ruler_targets(records)
    missed = targets.filter(pl.col("met") != "yes")
    st.dataframe(targets, hide_index=True)
    if missed.height:
        st.warning("Missed or not measured: " + "; ".join(f"{row['target']} ({row['measured']})"
                                                        for row in missed.iter_rows(named=True)) + ".")
    st.write(measurements.length_text(records, measurements.trained_length()))
    accuracy = measurements.ruler_accuracy(records)
    dense = accuracy.filter(pl.col("selector") == "dense")
    if dense["accuracy"].max() == 0:
        st.warning("This model does not retrieve needles (dense accuracy is 0 at every length), so the "
                   "retrieval rows cannot tell the selectors apart.")
    st.caption("Mean accuracy over the five tasks with its 95% interval (a normal approximation over the samples); "
               "samples: all tasks' together.")
    st.dataframe(tables.readable(accuracy), hide_index=True)
    change = measurements.perplexity_change(records)
    band = st.radio("Band", sorted(change["band"].unique().to_list()), horizontal=True, key=f"{key}_band")
    st.plotly_chart(figures.perplexity_change(change, band), key=f"{key}_ppl")
    missing = measurements.not_measured_text(records, meta["samples"])
    if missing:
        st.info("Not measured (settings the run reached at other lengths):\n" + "\n".join(missing))


st.subheader("Default model: RULER-style retrieval and held-out perplexity")
ruler_file = RESULTS / "ruler.json"
evaluated = (json.loads(ruler_file.read_text(encoding="utf-8")).get("checkpoint_sha256") if ruler_file.is_file()
             else None)      # the default's weights, as its evaluation names them
if not ruler_file.is_file():
    st.info("No evaluation committed yet (python -m analysis.ruler_eval writes it).")
else:
    st.write("The default has only Gated DeltaNet layers: a needle must pass through the state whose commits "
             "the selectors keep or skip, so the selectors can be told apart on it (data/default-model/README.md).")
    evaluation(ruler_file, "results")
    spread_file = RESULTS / "perplexity_spread.json"
    if spread_file.is_file():
        spread = json.loads(spread_file.read_text(encoding="utf-8"))
        meta = spread["meta"]
        st.markdown(f"**Held-out perplexity over every window** ({meta['setting']} against dense)")
        caption(spread_file.name, {"device": f"{meta['device']} ({meta['backend']} backend)", "date": meta["date"],
                                   "build": "not recorded", "command": meta["command"]})
        measured = meta.get("checkpoint_sha256")
        if measured is None or measured != evaluated:
            st.warning(f"This file measured other weights (sha256 {str(measured)[:12]}) than the evaluation above "
                       f"({str(evaluated)[:12]}).")
        st.write("The perplexity target above is read on the evaluation's seeded sample of windows; here is every "
                 "non-overlapping window of each held-out source, with a 95% bootstrap interval over windows and the "
                 "sample's own figure beside it.")
        st.dataframe(pl.DataFrame([{
            "source": row["source"], "windows": row["windows"], "dense ppl": round(row["perplexity_dense"], 2),
            "sparse ppl": round(row["perplexity_sparse"], 2), "change %": round(100 * row["change"], 2),
            "interval %": f"{100 * row['interval'][0]:+.2f} to {100 * row['interval'][1]:+.2f}",
            "one window, min / max %": f"{100 * row['per_window_change_min']:+.2f} / "
                                       f"{100 * row['per_window_change_max']:+.2f}",
            **{f"{count}-window sample %": round(100 * sample["change"], 2)
               for count, sample in row.get("samples", {}).items()}}
            for row in spread["sources"]]), hide_index=True)

cross_check_file = RESULTS / "gdn_only_eval_cpu.json"
cross_check_reference = RESULTS / measurements.CROSS_CHECK_REFERENCE
if cross_check_reference.is_file() and cross_check_file.is_file():
    st.subheader("Cross-check: the same evaluation on the CPU")
    meta, agreement = measurements.cross_check(cross_check_file, cross_check_reference)
    caption(cross_check_file.name, {"device": f"{meta['this_device']} ({meta['this_backend']} backend)",
                                    "date": meta["this_date"], "build": "not recorded", "command": meta["this_command"]})
    equal, total = agreement["equal"].sum(), agreement["samples"].sum()
    whose = ("the default's weights" if (evaluated or "").startswith(meta["checkpoint"]) else
             "earlier weights than the default's now, the pretrained checkpoint before its sparse fine-tune")
    st.write(f"One checkpoint (sha256 {meta['checkpoint'][:12]}: {whose}) on the same samples through the CPU torch "
             f"backend, against its evaluation `{cross_check_reference.name}` ({meta['reference_device']}, "
             f"{meta['reference_backend']} backend): {equal:,} of {total:,} per-sample scores are equal. Notes: "
             f"analysis/results/gdn_only_eval_cpu.notes.md.")
    st.dataframe(tables.readable(agreement), hide_index=True)
