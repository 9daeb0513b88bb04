"""Selected events: all layers at a glance, one layer per head pair and chunk, the chunk's text."""
import polars as pl
import streamlit as st

from app import figures, session, tables, viewstate
from app.views import common

OVERVIEW_COLUMNS = 512  # chunk bins in the all-layers overview
LAYER_COLUMNS = 1024  # above this many chunks in the window, the per-layer heatmap bins
ZOOM_CHUNKS = 256  # width of the window the zoom button opens around a chunk
CONTEXT_CHARS = 160  # text of the neighbouring chunks shown around the chosen one

st.title("Selected events")
common.explain("events")
stored = common.require_run()
common.run_caption(stored)
result, text = stored.result, stored.text
events, chunks = result.events, result.chunks
layers = sorted(events["layer"].unique().to_list())
n_chunks = chunks.height
view = session.put_view(viewstate.clamp(session.view(), max(layers) + 1, n_chunks, layers))
chunk = view.chunk if view.chunk is not None else 0


def set_chunk(value: int) -> None:
    value = max(0, min(n_chunks - 1, int(value)))
    session.set_view(chunk=value)
    st.session_state["chunk_input"] = value


def on_chunk_input() -> None:
    session.set_view(chunk=int(st.session_state["chunk_input"]))


def on_plot_select(key: str) -> None:
    points = st.session_state[key].selection.points
    if points:
        set_chunk(int(points[0]["customdata"]))  # x is a binned column's centre, not a chunk


def on_layer() -> None:
    session.set_view(layer=int(st.session_state["layer_pick"]))


def on_value() -> None:
    session.set_view(value=st.session_state["value_pick"])


def on_window() -> None:
    start, end = st.session_state["window_pick"]
    full = (start, end) == (0, n_chunks)
    session.set_view(window_start=None if full else start, window_end=None if full else end)


def zoom_window() -> tuple[int, int]:
    start = max(0, min(chunk - ZOOM_CHUNKS // 2, n_chunks - ZOOM_CHUNKS))
    return start, min(n_chunks, start + ZOOM_CHUNKS)


def zoom_around_chunk() -> None:
    start, end = zoom_window()
    session.set_view(window_start=start, window_end=end)
    st.session_state["window_pick"] = (start, end)


# ---- overview --------------------------------------------------------------------------------
st.plotly_chart(figures.layer_overview(events, OVERVIEW_COLUMNS, chunk=view.chunk), key="overview")

# ---- one layer -------------------------------------------------------------------------------
window = (view.window_start or 0, view.window_end or n_chunks)
# Widget state may hold values of another run (the sidebar switches runs in place): refit it.
if st.session_state.get("layer_pick") not in layers:
    st.session_state["layer_pick"] = view.layer
st.session_state.setdefault("value_pick", view.value)
if tuple(st.session_state.get("window_pick", (-1, -1))) != window:
    st.session_state["window_pick"] = window
left, middle, right = st.columns([1, 2, 3])
layer = left.selectbox("Layer", layers, key="layer_pick", on_change=on_layer)
values = list(viewstate.VALUES) if tables.has_error(events) else ["selected", "score"]
if st.session_state["value_pick"] not in values:
    st.session_state["value_pick"] = "selected"
value = middle.radio("Colour by", values, horizontal=True, key="value_pick", on_change=on_value,
                     format_func=viewstate.VALUE_LABELS.get)
if n_chunks > 1:
    right.slider("Chunk window", 0, n_chunks, key="window_pick", on_change=on_window)
if n_chunks > ZOOM_CHUNKS:
    # Above LAYER_COLUMNS chunks the heatmap bins them; a window of ZOOM_CHUNKS shows one column each.
    first, last = zoom_window()
    right.button(f"Zoom to chunks {first}–{last - 1}, around chunk {chunk} (one column per chunk)",
                 on_click=zoom_around_chunk)
else:
    right.caption(f"All {n_chunks} chunks are shown at full resolution, one column per chunk: no zoom needed.")
previews = tables.chunk_previews(text, chunks) if text else None
heatmap = figures.event_heatmap(events, layer, value, window, LAYER_COLUMNS, previews, chunk=view.chunk)
st.plotly_chart(heatmap, key="layer_heatmap", on_select=lambda: on_plot_select("layer_heatmap"),
                selection_mode="points")

# ---- the chunk's text ------------------------------------------------------------------------
st.subheader("Read the document")
if st.session_state.get("chunk_input") != chunk:
    st.session_state["chunk_input"] = chunk
nav = st.columns([1, 1, 1, 3])
nav[0].button("◀ previous", on_click=set_chunk, args=(chunk - 1,), disabled=chunk <= 0)
nav[1].number_input("Chunk", 0, max(0, n_chunks - 1), key="chunk_input", on_change=on_chunk_input)
nav[2].button("next ▶", on_click=set_chunk, args=(chunk + 1,), disabled=chunk >= n_chunks - 1)
query = nav[3].text_input("Find in the document", key="find_text", placeholder="a word or phrase")
if query:
    found = tables.find_chunks(text, chunks, query)
    if found:
        st.caption(f"Found in {len(found)} chunk(s)" + (" (first 50)" if len(found) == 50 else "") + ":")
        hits = st.columns(min(len(found), 10))
        for i, hit in enumerate(found[:10]):
            hits[i].button(f"chunk {hit}", key=f"hit_{hit}", on_click=set_chunk, args=(hit,))
    else:
        st.caption("Not found.")

row = chunks.filter(pl.col("chunk") == chunk)
if row.height:
    st.caption(f"Chunk {chunk}: tokens {row['token_start'][0]}–{row['token_end'][0] - 1}")
text_column, detail_column = st.columns([3, 2])
with text_column:
    if text:
        # The chunk with a little of its neighbours, so a chunk cut mid-sentence still reads.
        if chunk > 0:
            st.caption("…" + tables.chunk_text(text, chunks, chunk - 1)[-CONTEXT_CHARS:])
        st.code(tables.chunk_text(text, chunks, chunk), language=None, wrap_lines=True)
        if chunk < n_chunks - 1:
            st.caption(tables.chunk_text(text, chunks, chunk + 1)[:CONTEXT_CHARS] + "…")
    else:
        st.info("This run was saved without its document text.")
with detail_column:
    here = events.filter((pl.col("layer") == layer) & (pl.col("chunk") == chunk)).sort("head_pair")
    share = here["selected"].mean() if here.height else 0.0
    st.write(f"Layer {layer}: {here['selected'].sum()} of {here.height} head pairs commit this chunk ({share:.0%}).")
    st.dataframe(tables.readable(here.select("head_pair", "selected", "score", "rel_err_o")), hide_index=True,
                 height=min(400, 35 * (here.height + 1) + 3))
session.sync_url()
