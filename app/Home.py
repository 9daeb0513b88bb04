"""SparseGDN Explorer: `streamlit run app/Home.py` (from any folder; its settings are app/.streamlit/)."""
import sys
from pathlib import Path

# Streamlit puts only app/ on sys.path; the app imports `app.*` and `analysis.*` from the root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from analysis.timing import use_threads  # noqa: E402
from app import icon, serving, session  # noqa: E402
from app.views import common  # noqa: E402

st.set_page_config(page_title="SparseGDN Explorer", page_icon=icon.page_icon(), layout="wide")
problem = serving.server_problem()
if problem is None:
    try:
        session.check_settings()
    except ValueError as error:
        problem = f"The server's settings are wrong: {error}. See app/README.md, Settings."
if problem is not None:   # every page runs through here: none of them starts on a bad setting
    st.error(problem)
    st.stop()
use_threads()   # once per server process: timings are taken without oversubscribing the cores
session.init()


def home() -> None:
    """The app's root URL: the events view when the session opened on a result (demo mode, a link
    naming a run or an example), else the run page. Every view has its own path, so a link to any of
    them resolves as it is; only "/" moves on."""
    st.switch_page("views/events.py" if session.opens_on_result() else "views/run.py")


# The default page is served at "/" and answers to no other path; were it a view, a link to that
# view's own path (/run, /events) would open Streamlit's "Page not found" dialog.
pages = [
    st.Page(home, title="SparseGDN Explorer", url_path="", default=True, visibility="hidden"),
    st.Page("views/run.py", title="Model and document", url_path="run"),
    st.Page("views/events.py", title="Selected events", url_path="events"),
    st.Page("views/budget.py", title="Budget allocation", url_path="budget"),
    st.Page("views/error.py", title="Error versus dense", url_path="error"),
    st.Page("views/timings.py", title="Prefill timings", url_path="timings"),
    st.Page("views/compare.py", title="Compare", url_path="compare"),
    st.Page("views/export.py", title="Export and share", url_path="export"),
    st.Page("views/results.py", title="Measured results", url_path="results"),
    st.Page("views/tour.py", title="Guided tour", url_path="tour"),
]
page = st.navigation(pages)
common.sidebar()
page.run()
