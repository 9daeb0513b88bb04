"""Compare: two configurations (budget, selector, band) side by side on one document. Runs of two
different documents are never paired: the page says so and drops the second."""
import dataclasses

import streamlit as st

from app import figures, session, tables
from app.views import common

st.title("Compare two configurations")
common.explain("compare")
stored = common.require_run()
common.run_caption(stored)
entry = session.current()
document_hash = entry.document_hash or session.document_of(stored)[1]
st.write(f"**A** is the current run, on **{entry.document}**: {session.options_label(stored.result.summary)}. "
         "Choose **B**: run another "
         "configuration on the same document, or pick one of this session's runs of it.")
if not stored.text:
    st.warning("The current run was saved without its document, so another configuration cannot run on it.")

same_document = [e for e in session.history() if e.key != entry.key and document_hash is not None
                 and e.document_hash == document_hash and session.stored_run(e.key) is not None]
view = session.view()
base = entry.config or session.RunConfig()
with st.form("compare_b"):
    # B starts from A's options with a smaller budget and the uniform selector: a contrast worth a look.
    sparse_b = common.sparse_controls(base.sparse.replace(budget=0.1, selector="uniform"), key_prefix="compare_",
                                      label_prefix="B: ")
    run_b = st.form_submit_button(f"Run B on {entry.document}", disabled=not stored.text)
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
    pick = st.selectbox(f"…or B from this session's runs of {entry.document}", keys, format_func=labels.get,
                        index=keys.index(view.compare) if view.compare in keys else 0, key="compare_pick")
    if st.button("Use as B"):
        view = session.set_view(compare=pick)

other = session.stored_run(view.compare) if view.compare else None
if other is not None:
    other_name, other_hash = session.document_of(other)
    if document_hash is None or other_hash != document_hash:
        st.error(f"B ({view.compare}) ran on **{other_name}**, A on **{entry.document}**: runs of different documents "
                 "are not compared. Run B on this document, or pick one of this session's runs of it.")
        view = session.set_view(compare=None)
        other = None
if other is None:
    session.sync_url()
    st.stop()

a, b = stored.result, other.result
names = ("A", "B")
st.caption(f"Both runs are of **{entry.document}** (the same text).")
st.warning(common.TIMINGS_APART, icon=":material/timer:")
columns = st.columns(2)
for column, name, run in zip(columns, names, (stored, other)):
    result, s = run.result, run.result.summary
    with column:
        st.subheader(f"{name}: {session.options_label(s)}")
        common.prefill_metric(st, result)
        st.caption(common.how_timed(s))
        if s.get("kl_mean") is not None:
            st.metric("KL to dense", f"{s['kl_mean']:.4g}")
            st.metric("Top-1 agreement", f"{s['top1_agreement']:.2%}")
        common.passkey_outcome(run)
        st.plotly_chart(figures.layer_overview(result.events, 256), key=f"compare_overview_{name}")
labels = tuple(f"{n}: {session.options_label(r.summary)}" for n, r in zip(names, (a, b)))
attention = tables.attention_layers(a.summary.get("gdn_layers") or a.layers["layer"].to_list(),
                                    a.summary.get("n_layers"))
if a.layers["rel_err_o"].null_count() < a.layers.height and b.layers["rel_err_o"].null_count() < b.layers.height:
    st.plotly_chart(figures.compare_layers(a.layers, b.layers, "rel_err_o", labels, "relative output error", attention),
                    key="compare_error")
st.plotly_chart(figures.compare_layers(a.layers, b.layers, "core_ms_sparse", labels, "GDN-core ms (sparse)", attention),
                key="compare_time")
common.attention_caption(attention)
session.sync_url()
