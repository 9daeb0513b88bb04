"""Compare: two configurations (budget, selector, band) side by side on one document."""
import streamlit as st

from app import figures, runs, session
from app.views import common

st.title("Compare two configurations")
stored = common.require_run()
entry = session.current()
st.write(f"**A** is the current run: {entry.label}. Choose **B**: run another configuration on the same "
         "document, or pick one of this session's runs of it.")
if not stored.text:
    st.warning("The current run was saved without its document, so another configuration cannot run on it.")

same_document = [e for e in session.history() if e.key != entry.key and (run := session.stored_run(e.key)) is not None
                 and runs.document_hash(run.text) == runs.document_hash(stored.text)]
view = session.view()
with st.form("compare_b"):
    left, middle, right = st.columns(3)
    budget = left.slider("B: budget ρ", 0.01, 1.0, 0.1, 0.01, key="compare_budget")
    selector = middle.selectbox("B: selector", common.SELECTORS, index=1, key="compare_selector")
    band = right.select_slider("B: band", options=[0, 1, 2, 3], value=1, key="compare_band")
    run_b = st.form_submit_button("Run B on the same document", disabled=not stored.text)
if run_b:
    base = dict(entry.config) if entry.config else {}
    config = session.RunConfig(**{**{k: v for k, v in base.items() if k in session.RunConfig.__dataclass_fields__},
                                  "budget": budget, "selector": selector, "band": band, "compare_dense": True})
    bar = st.progress(0.0, text="Starting B…")
    try:
        b_entry = session.execute(entry.spec, session.Document(entry.document, stored.text), config,
                                  progress=lambda u: bar.progress(min(1.0, float(u.fraction)), text=u.message or u.stage),
                                  make_current=False)
        view = session.set_view(compare=b_entry.key)
    except session.RunFailed as error:
        st.error(str(error))
    bar.empty()
if same_document:
    labels = {e.key: e.label for e in same_document}
    keys = list(labels)
    pick = st.selectbox("…or B from this session's runs of this document", keys, format_func=labels.get,
                        index=keys.index(view.compare) if view.compare in keys else 0, key="compare_pick")
    if st.button("Use as B"):
        view = session.set_view(compare=pick)

other = session.stored_run(view.compare) if view.compare else None
if other is None:
    st.stop()

a, b = stored.result, other.result
names = ("A", "B")
columns = st.columns(2)
for column, name, result in zip(columns, names, (a, b)):
    s = result.summary
    with column:
        st.subheader(f"{name}: {s['selector']}, ρ={s['budget']}, band {s['band']}")
        st.metric("Whole prefill, sparse", common.ms(s["prefill_ms_sparse"]),
                  common.percent_change(s["prefill_ms_sparse"], s.get("prefill_ms_dense")), delta_color="inverse")
        if s.get("kl_mean") is not None:
            st.metric("KL to dense", f"{s['kl_mean']:.4g}")
            st.metric("Top-1 agreement", f"{s['top1_agreement']:.2%}")
        st.plotly_chart(figures.layer_overview(result.events, 256), key=f"compare_overview_{name}")
labels = tuple(f"{n}: {r.summary['selector']} ρ={r.summary['budget']} band {r.summary['band']}"
               for n, r in zip(names, (a, b)))
if a.layers["rel_err_o"].null_count() < a.layers.height and b.layers["rel_err_o"].null_count() < b.layers.height:
    st.plotly_chart(figures.compare_layers(a.layers, b.layers, "rel_err_o", labels, "relative output error"),
                    key="compare_error")
st.plotly_chart(figures.compare_layers(a.layers, b.layers, "core_ms_sparse", labels, "GDN-core ms (sparse)"),
                key="compare_time")
session.sync_url()
