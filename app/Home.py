"""SparseGDN Explorer: `streamlit run app/Home.py` (from the repository root)."""
import sys
from pathlib import Path

# Streamlit puts only app/ on sys.path; the app imports `app.*` and `analysis.*` from the root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import serving, session  # noqa: E402
from app.views import common  # noqa: E402

st.set_page_config(page_title="SparseGDN Explorer", page_icon=":material/grid_view:", layout="wide")
problem = serving.server_problem()
if problem is None:
    try:
        session.check_settings()
    except ValueError as error:
        problem = f"The server's settings are wrong: {error}. See app/README.md, Settings."
if problem is not None:   # every page runs through here: none of them starts on a bad setting
    st.error(problem)
    st.stop()
session.init()

# In demo mode (or when a link names an example) open on the events view, no model needed.
opens_on_result = session.current() is not None and session.current().source in ("example", "saved")
pages = [
    st.Page("views/run.py", title="Model and document", url_path="run", default=not opens_on_result),
    st.Page("views/events.py", title="Selected events", url_path="events", default=opens_on_result),
    st.Page("views/budget.py", title="Budget allocation", url_path="budget"),
    st.Page("views/error.py", title="Error versus dense", url_path="error"),
    st.Page("views/timings.py", title="Prefill timings", url_path="timings"),
    st.Page("views/compare.py", title="Compare", url_path="compare"),
    st.Page("views/export.py", title="Export and share", url_path="export"),
    st.Page("views/results.py", title="Measured results", url_path="results"),
]
page = st.navigation(pages)
common.sidebar()
page.run()
