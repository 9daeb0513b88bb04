"""The project's committed measurements: kernel speed on a GPU and the default model's evaluation."""
import polars as pl
import streamlit as st

from app import figures, results

st.title("Measured results")
st.caption("What the project measured and committed under analysis/results/ (each file names its command, "
           "card and date). These are not live: the live timings of your own runs are under Prefill timings.")

st.subheader("Kernel speed")
bench = results.kernel_bench()
if bench.is_empty():
    st.info("No kernel benchmark committed yet (benchmarks/kernel_bench.py writes it on a GPU).")
else:
    first = bench.row(0, named=True)
    st.caption(f"{first['device']}, {first['date']}: `{first['command']}`")
    st.plotly_chart(figures.kernel_speedup(bench), key="results_speedup")
    st.dataframe(bench.select("T", "budget", "band", "selector", "sparsegdn_ms", "fla_ms", "speedup_vs_fla",
                              "flashqla_spec_ms", "peak_mem_mb", "fla_peak_mem_mb"), hide_index=True)

st.subheader("Default model: held-out perplexity and RULER-style retrieval")
evaluation = results.ruler()
if evaluation.is_empty():
    st.info("No evaluation committed yet (analysis/ruler_eval.py writes it).")
else:
    change = results.perplexity_change(evaluation)
    band = st.radio("Band", sorted(change["band"].unique().to_list()), horizontal=True, key="results_band")
    st.plotly_chart(figures.perplexity_change(change, band), key="results_ppl")
    accuracy = results.ruler_accuracy(evaluation)
    dense = accuracy.filter(pl.col("selector") == "dense")
    if dense["accuracy"].max() == 0:
        st.warning("The default model does not retrieve needles yet (dense accuracy is 0 at every length), so "
                   "the retrieval rows cannot tell the selectors apart; see data/default-model/README.md.")
    st.dataframe(accuracy, hide_index=True)
