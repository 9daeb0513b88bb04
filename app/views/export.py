"""Export and share: records as CSV or Parquet, figures as standalone HTML, a link to this view."""
import streamlit as st

from analysis.records import OPTIONAL_TABLES
from app import export, figures, session, viewstate
from app.views import common

st.title("Export and share")
common.explain("export")
stored = common.require_run()
common.run_caption(stored)
result = stored.result
key = stored.key.replace(session.EXAMPLE_PREFIX, "example-")

st.subheader("Records")
fmt = st.radio("Format", export.FORMATS, horizontal=True, key="export_format")
# Runs recorded before the timings or tokens tables existed have them empty: no button for them.
names = [name for name in export.RECORD_TABLES if name not in OPTIONAL_TABLES or getattr(result, name).height]
columns = st.columns(len(names) + 1)
mime = "text/csv" if fmt == "csv" else "application/octet-stream"
for column, name in zip(columns, names):
    frame = getattr(result, name)
    # Callables: the bytes are made when the button is clicked, not on every rerun (a 128K-token
    # run has 1.6M events; building every format eagerly took seconds per page view).
    column.download_button(f"{name} ({frame.height:,} rows)", lambda frame=frame: export.frame_bytes(frame, fmt),
                           file_name=f"{key}-{name}.{fmt}", mime=mime, key=f"download_{name}")
columns[-1].download_button("everything (.zip)", lambda: export.records_zip(result, fmt, stored.text or None),
                            file_name=f"{key}-records-{fmt}.zip", mime="application/zip", key="download_zip")

st.subheader("Figures")
view = session.view()
layer = view.layer if view.layer is not None else int(result.layers["layer"].min())
builders = {
    "events_overview": lambda: figures.layer_overview(result.events),
    f"events_layer_{layer}": lambda: figures.event_heatmap(result.events, layer),
    "error_by_layer": lambda: figures.error_by_layer(result.layers),
    "error_by_head_pair": lambda: figures.error_heatmap(result.heads),
    "timings_by_layer": lambda: figures.timings_by_layer(result.layers, result.summary.get("device", "?")),
}
name = st.selectbox("Figure", list(builders), key="export_figure")
source = session.current().label if session.current() else None     # the document and configuration, in words
st.download_button("Download as HTML (opens offline)", lambda: export.figure_html(builders[name](), source),
                   file_name=f"{key}-{name}.html", mime="text/html", key="download_figure")
st.caption("A standalone page with plotly.js included (about 5 MB), so it opens without a network.")

st.subheader("Share this view")
params = viewstate.view_to_params(view)
query = "&".join(f"{k}={v}" for k, v in params.items())
base = ""
try:
    base = str(st.context.url).split("?")[0].rsplit("/", 1)[0]
except Exception:  # st.context.url is absent outside a browser session (tests)
    base = ""
st.code(f"{base}/events?{query}" if base else f"/events?{query}", language=None)
st.caption("The address bar always carries the view (run, layer, chunk, window). A link opens the run while "
           "this server still has it (runs are also saved under runs/ when configured).")
session.sync_url()
