"""Error versus dense: per layer and head pair, along the document, and at model level."""
import streamlit as st

from app import figures, session, tables
from app.views import common

st.title("Error versus dense")
common.explain("error")
stored = common.require_run()
common.run_caption(stored)
result = stored.result
summary = result.summary
if not tables.has_error(result.layers):
    st.info("This run skipped the dense comparison. Run again with 'compare with dense' to see errors.")
    session.sync_url()   # the link still names the run
    st.stop()

columns = st.columns(4)
columns[0].metric("KL(dense ‖ sparse), mean per token", f"{summary['kl_mean']:.4g}")
columns[1].metric("Top-1 agreement", f"{summary['top1_agreement']:.2%}")
columns[2].metric("Perplexity, dense", f"{summary['ppl_dense']:.4g}")
columns[3].metric("Perplexity, sparse", f"{summary['ppl_sparse']:.4g}",
                  common.percent_change(summary["ppl_sparse"], summary["ppl_dense"]), delta_color="inverse")
common.passkey_outcome(stored)
if summary.get("random_weights"):
    st.caption("Random weights: model-level numbers describe the operator on this model, not language quality.")

attention = tables.attention_layers(summary.get("gdn_layers") or result.layers["layer"].to_list(),
                                    summary.get("n_layers"))
st.plotly_chart(figures.error_by_layer(result.layers, attention), key="error_layers")
common.attention_caption(attention)
error_columns = [c for c in ("rel_err_o", "rel_err_state") if tables.has_error(result.heads, c)]
which = st.radio("Head-pair error of", error_columns, horizontal=True, key="error_column",
                 format_func=tables.COLUMN_LABELS.get)
st.plotly_chart(figures.error_heatmap(result.heads, which), key="error_heads")

layers = sorted(result.layers["layer"].to_list())
view = session.view()
options = ["all layers", *layers]
if st.session_state.get("error_layer") not in options:
    st.session_state["error_layer"] = "all layers"
pick = st.selectbox("Along the document: layer", options, key="error_layer")
st.plotly_chart(
    figures.error_along_document(result.events, None if pick == "all layers" else pick, chunk=view.chunk),
    key="error_document",
)
session.sync_url()
