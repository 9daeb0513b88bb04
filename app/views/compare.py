"""Compare: two configurations (budget, selector, band) side by side on one document."""
import dataclasses

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
base = entry.config or session.RunConfig()
with st.form("compare_b"):
    # B starts from A's options with a smaller budget and the uniform selector: a contrast worth a look.
    sparse_b = common.sparse_controls(base.sparse.replace(budget=0.1, selector="uniform"), key_prefix="compare_",
                                      label_prefix="B: ")
    run_b = st.form_submit_button("Run B on the same document", disabled=not stored.text)
if run_b:
    config = dataclasses.replace(base, sparse=sparse_b, compare_dense=True)
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
