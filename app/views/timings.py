"""Prefill timings of the runs: dense against sparse, per layer and whole model, and the history."""
import polars as pl
import streamlit as st

from app import figures, session
from app.views import common
from sparsegdn import STAGES

st.title("Prefill timings")
stored = common.require_run()
common.run_caption(stored)
result = stored.result
summary = result.summary
device = common.device_label(summary)
st.write(f"Measured on **{device}** when this run was made" +
         (" (a prepared example: not measured on this machine)." if session.current().source == "example" else "."))
has_dense = result.layers["core_ms_dense"].null_count() < result.layers.height
core_dense = float(result.layers["core_ms_dense"].sum()) if has_dense else None
core_sparse = float(result.layers["core_ms_sparse"].sum())
columns = st.columns(4)
columns[0].metric("Whole prefill, dense", common.ms(summary.get("prefill_ms_dense")))
columns[1].metric("Whole prefill, sparse", common.ms(summary["prefill_ms_sparse"]),
                  common.percent_change(summary["prefill_ms_sparse"], summary.get("prefill_ms_dense")),
                  delta_color="inverse")
columns[2].metric("GDN core, dense (all layers)", common.ms(core_dense, 2))
columns[3].metric("GDN core, sparse (all layers)", common.ms(core_sparse, 2),
                  common.percent_change(core_sparse, core_dense), delta_color="inverse")
if not has_dense:
    st.caption("This run skipped the dense pass ('compare with dense' off): no dense timings.")
st.caption("The GDN core is one part of a prefill: a faster core saves its share of the whole, not more. "
           "On CPU the timings show the reference code path, not the GPU kernels.")
st.plotly_chart(figures.prefill_totals(summary, core_dense, core_sparse), key="timing_totals")
st.plotly_chart(figures.timings_by_layer(result.layers, device), key="timing_layers")

stages = summary.get("stages")
if stages:
    st.subheader("Where the sparse core spends its time")
    st.plotly_chart(figures.stage_breakdown(pl.DataFrame(stages), device), key="timing_stages")
    if [stage["stage"] for stage in stages] != list(STAGES):
        st.caption("This run was recorded before the stage names were fixed; its stages are shown as recorded.")
    st.caption("The stages of sparsegdn.STAGES, the same on every backend: intra_solve (the intra-chunk "
               "inverse and score statistics), selection, event_prepare (w, u of the committing events), "
               "state_pass (the sequential pass over chunks), output (every token's output). On the CPU they "
               "are the PyTorch reference's, not the GPU kernels'.")
else:
    st.caption("No stage breakdown for this run (runs made before stage timing was recorded have none).")

st.subheader("This session's runs")
rows = []
for entry in session.history():
    run = session.stored_run(entry.key)
    if run is None:
        continue
    s = run.result.summary
    rows.append({"label": f"{len(rows) + 1}. {entry.label}", "source": entry.source, "device": s.get("device"),
                 "n_tokens": s.get("n_tokens"), "prefill_ms_dense": s.get("prefill_ms_dense"),
                 "prefill_ms_sparse": s.get("prefill_ms_sparse"), "wall_s": entry.seconds})
if rows:
    history = pl.DataFrame(rows)
    st.plotly_chart(figures.timing_history(history), key="timing_history")
    st.dataframe(history, hide_index=True)
session.sync_url()
