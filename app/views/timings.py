"""Prefill timings of the runs: dense against sparse, per layer and whole model, and the history.
Every time is a median of repeats with its range; a change inside the noise is said, not coloured."""
import polars as pl
import streamlit as st

from analysis.timing import first_call_notes, plan_text, stage_source_text, warm_up_text
from app import figures, session, tables
from app.views import common
from sparsegdn import STAGES

st.title("Prefill timings")
common.explain("timings")
stored = common.require_run()
common.run_caption(stored)
result = stored.result
summary = result.summary
device = common.device_label(summary)
timing = summary.get("timing")
spreads = tables.timing_spreads(result)
entry = session.current()

if entry.source == "example":
    st.warning(f"A prepared example. {common.how_timed(summary)} It was not measured on this machine or with this "
               "server's load, so it is not compared with this session's runs below.")
else:
    st.write(common.how_timed(summary))

has_dense = result.layers["core_ms_dense"].null_count() < result.layers.height
core_dense = float(result.layers["core_ms_dense"].sum()) if has_dense else None
core_sparse = float(result.layers["core_ms_sparse"].sum())
columns = st.columns(4)
common.timing_metric(columns[0], "Whole prefill, dense", spreads.get("prefill_dense"),
                     median=summary.get("prefill_ms_dense"))
common.prefill_metric(columns[1], result, "Whole prefill, sparse")
common.timing_metric(columns[2], "GDN core, dense (all layers)", spreads.get("core_dense"),
                     median=summary.get("core_ms_dense_total", core_dense), digits=2)
common.timing_metric(columns[3], "GDN core, sparse (all layers)", spreads.get("core_sparse"), spreads.get("core_dense"),
                     median=summary.get("core_ms_sparse_total", core_sparse),
                     old_median=summary.get("core_ms_dense_total", core_dense), digits=2)
if not has_dense:
    st.caption("This run skipped the dense pass ('compare with dense' off): no dense timings.")
if timing and timing.get("warm_up"):
    st.caption(f"First call (warm-up, not counted above): {warm_up_text(timing['warm_up'])} — compilation and "
               "autotuning on a GPU, first use of memory and libraries on the CPU.")
if timing and plan_text(timing):
    st.caption(plan_text(timing))
first_calls = first_call_notes(timing or {})
if first_calls:
    st.warning("A figure above includes first-call work: Triton compiled or autotuned inside a timed repeat, "
               "after the warm-up. " + " ".join(first_calls))
st.caption("The GDN core is one part of a prefill: a faster core saves its share of the whole, not more. "
           + tables.core_implementation(summary))
st.plotly_chart(figures.prefill_totals(summary, summary.get("core_ms_dense_total", core_dense),
                                       summary.get("core_ms_sparse_total", core_sparse)), key="timing_totals")
summary_layers = summary.get("gdn_layers") or result.layers["layer"].to_list()
attention = tables.attention_layers(summary_layers, summary.get("n_layers"))
ranges = tables.core_ranges(result.timings) if result.timings.height else None
st.plotly_chart(figures.timings_by_layer(result.layers, device, ranges, attention), key="timing_layers")
common.attention_caption(attention)

stages = summary.get("stages")
if stages:
    st.subheader("Where the sparse core spends its time")
    st.plotly_chart(figures.stage_breakdown(pl.DataFrame(stages), device), key="timing_stages")
    if [stage["stage"] for stage in stages] != list(STAGES):
        st.caption("This run was recorded before the stage names were fixed; its stages are shown as recorded.")
    st.caption("The stages of sparsegdn.STAGES, the same names on every backend: intra_solve (the intra-chunk "
               "inverse), selection, event_prepare (w, u of the committing events), state_pass (the sequential "
               "pass over commits), output (every token's output). The Triton path runs the last two as one launch "
               "(outputs computed while the commit chains run), so its state_pass bar holds both and its output "
               "bar is about zero. The torch path runs the last four once per slab of chunks; each bar sums them "
               "over slabs, layers and segments " + stage_source_text(summary.get("timing") or {}))
else:
    st.caption("No stage breakdown for this run (runs made before stage timing was recorded have none).")

st.subheader("This session's runs")
st.caption(common.TIMINGS_APART)
here, elsewhere = [], []
for past in session.history():
    run = session.stored_run(past.key)
    if run is None:
        continue
    row = tables.history_row(run.result, past.label, past.source, past.seconds)
    kept = here if past.source in ("computed", "cached") else elsewhere
    kept.append({"number": f"#{len(kept) + 1}", **row})       # runs of the same options keep bars of their own
if here:
    history = pl.DataFrame(here)
    st.plotly_chart(figures.timing_history(history), key="timing_history")
    st.dataframe(tables.readable(history.drop(pl.selectors.ends_with("_low", "_high"))), hide_index=True)
else:
    st.caption("No run of this session was measured on this server yet.")
if elsewhere:
    st.caption("Measured elsewhere or at another time (prepared examples, runs opened from a link): listed, "
               "not drawn against this session's runs.")
    st.dataframe(tables.readable(pl.DataFrame(elsewhere).drop(pl.selectors.ends_with("_low", "_high"))),
                 hide_index=True)
session.sync_url()
