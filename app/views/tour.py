"""The guided tour: three steps through the passkey example, for a class. The words are in
app/teaching.py; every number comes from the example's records."""
import streamlit as st

from app import figures, session, tables, teaching
from app.views import common

st.title("Guided tour")
st.info(teaching.NOTES["tour"], icon=":material/school:")
example = teaching.TOUR_EXAMPLE
entry = session.current()
if entry is None or entry.key != session.EXAMPLE_PREFIX + example:
    if example not in session.examples():
        st.warning(f"The tour needs the prepared example {example!r}, which this server does not have "
                   "(SPARSEGDN_EXAMPLES_DIR).")
        st.stop()
    st.write(f"The tour runs on the prepared example **{example}**: a document with one fact hidden in it.")
    st.button("Start the tour on the passkey example", type="primary", on_click=common.open_example, args=(example,))
    session.sync_url()
    st.stop()

stored = session.current_run()
result, text = stored.result, stored.text
steps = teaching.TOUR_STEPS
step = min(session.view().step or 0, len(steps) - 1)
chunk = tables.needle_chunk(text, result.chunks, teaching.TOUR_NEEDLE)
layers = sorted(result.layers["layer"].to_list())
favourable = tables.layer_keeping_most(result.events, chunk) if chunk is not None else layers[0]
# The tour's own choice (not the events page's layer): it opens on the favourable layer and says so.
layer = st.selectbox("Layer", layers, index=layers.index(favourable), key="tour_layer")

st.progress((step + 1) / len(steps), text=f"Step {step + 1} of {len(steps)}")
if chunk is not None:
    st.caption(common.tour_layer_note(result, chunk, favourable))
title, words = steps[step]
st.subheader(f"{step + 1}. {title}")
st.write(words)
summary = result.summary
if step == 0:
    kept, total = summary.get("events_selected"), summary.get("events_total")
    if kept is None:
        kept, total = int(result.events["selected"].sum()), result.events.height
    st.write(f"This run kept **{kept:,} of {total:,}** events (budget ρ = {summary['budget']}) over "
             f"{summary['n_chunks']} chunks." + (f" The passkey is in chunk **{chunk}**." if chunk is not None else ""))
    st.plotly_chart(figures.event_heatmap(result.events, layer, chunk=chunk), key="tour_events")
    if chunk is not None:
        with st.expander(f"The text of chunk {chunk}"):
            st.code(tables.chunk_text(text, result.chunks, chunk), language=None, wrap_lines=True)
elif step == 1:
    st.plotly_chart(figures.scores_kept_and_skipped(result.events, layer, chunk), key="tour_scores")
    if chunk is not None:
        fate = tables.chunk_in_layer(result.events, layer, chunk)
        st.write(f"In layer {layer}, **{fate['kept']} of {fate['head_pairs']}** head pairs kept the passkey's "
                 f"chunk; its best score ranks **{fate['rank']} of {fate['events']}** events of the layer, which "
                 f"kept {fate['kept_in_layer']}.")
else:
    st.plotly_chart(figures.error_along_document(result.events, layer, chunk=chunk), key="tour_error")
    if summary.get("top1_agreement") is not None:
        st.write(f"Over the whole document the sparse model picked the same next token as the dense one at "
                 f"**{summary['top1_agreement']:.1%}** of positions; its perplexity changed by "
                 f"**{common.percent_change(summary['ppl_sparse'], summary['ppl_dense'])}** "
                 f"(dense {summary['ppl_dense']:.4g}, sparse {summary['ppl_sparse']:.4g}).")
    common.passkey_outcome(stored)
    st.page_link("views/error.py", label="More on the error", icon=":material/query_stats:")

back, forward = st.columns(2)
back.button("◀ Back", disabled=step == 0, on_click=session.set_view, kwargs={"step": step - 1}, key="tour_back")
forward.button("Next ▶", disabled=step == len(steps) - 1, on_click=session.set_view, kwargs={"step": step + 1},
               key="tour_next", type="primary")
session.sync_url()
