"""Budget allocation: how the shared budget was spread over head pairs and layers."""
import streamlit as st

from app import figures, session, tables
from app.views import common

st.title("Budget allocation")
common.explain("budget")
stored = common.require_run()
common.run_caption(stored)
heads = stored.result.heads
layers = sorted(heads["layer"].unique().to_list())
view = session.view()
st.write(
    "With the `score` selector the head pairs of a layer share one budget, so each head pair receives a "
    "different number of events for each input; `uniform` gives every head pair the same count."
)
if st.session_state.get("budget_layer") not in layers:
    st.session_state["budget_layer"] = view.layer if view.layer in layers else layers[0]
layer = st.selectbox("Layer", layers, key="budget_layer",
                     on_change=lambda: session.set_view(layer=int(st.session_state["budget_layer"])))
left, right = st.columns(2)
left.plotly_chart(figures.allocation_by_head_pair(tables.events_per_head_pair(heads, layer), layer),
                  key="alloc_heads")
summary = stored.result.summary
attention = tables.attention_layers(summary.get("gdn_layers") or layers, summary.get("n_layers"))
right.plotly_chart(figures.allocation_by_layer(tables.events_per_layer(heads), attention), key="alloc_layers")
common.attention_caption(attention)
st.plotly_chart(figures.allocation_heatmap(heads), key="alloc_heatmap")
st.caption("Spread of events over head pairs, per layer (variation = standard deviation / mean).")
st.dataframe(tables.readable(tables.allocation_spread(heads)), hide_index=True)
session.sync_url()
