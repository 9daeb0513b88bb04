"""Model and document, controls, run: views 1 and 2."""
import streamlit as st

from app import session
from app.views import common
from sparsegdn import CHUNK_SIZE, SparseConfig, num_chunks

GPU_ONLY = ("qwen3.5-4b-shape",)  # timing preset: a 4B model on CPU would only make people wait

st.title("SparseGDN Explorer")
st.write(
    "Give a Qwen3.5 model a long document and see which recurrent events the SparseGDN selector kept, "
    "what skipping the others cost in error, and what it saved in prefill time."
)
config = session.settings()
device = session.device()

# ---- model ------------------------------------------------------------------------------------
model_column, document_column = st.columns([2, 3], gap="large")
with model_column:
    st.subheader("Model")
    try:
        choices = [c for c in session.model_choices() if session.cuda_available() or c.spec not in GPU_ONLY]
    except session.ModelError as error:
        st.error(str(error))
        st.stop()
    if not choices:
        st.error("No model is available. Check SPARSEGDN_MODEL_ROOTS (see app/README.md).")
        st.stop()
    specs = [c.spec for c in choices]
    by_spec = {c.spec: c for c in choices}
    spec = st.selectbox("Model", specs, format_func=lambda s: by_spec[s].label, key="model_spec")
    st.caption(by_spec[spec].description)
    if not session.cuda_available():
        st.caption("The Qwen3.5-4B-shape timing preset is offered on machines with a CUDA GPU.")
    try:
        loaded = session.get_model(spec, device)
    except session.ModelError as error:
        st.error(str(error))
        st.stop()
    weights = " (random weights: errors and timings are about the operator, not a trained model)" \
        if loaded.random_weights else ""
    st.caption(
        f"{loaded.n_layers} layers, {len(loaded.gdn_layers)} GDN layers × {loaded.head_pairs} head pairs, "
        f"up to {loaded.max_tokens:,} tokens, on {loaded.device}{weights}."
    )

# ---- document ---------------------------------------------------------------------------------
with document_column:
    st.subheader("Document")
    source = st.radio("Source", ("Bundled sample", "Upload", "Paste"), horizontal=True, key="doc_source")
    doc = None
    if source == "Bundled sample":
        samples = session.samples()
        if samples:
            titles = [f"{s.title} ({s.n_bytes / 1e3:.0f} KB)" for s in samples]
            pick = st.selectbox("Sample", range(len(samples)), format_func=lambda i: titles[i], key="doc_sample")
            st.caption(samples[pick].description)
            try:
                doc = session.Document(samples[pick].name, samples[pick].read(), bundled=True)
            except session.DocumentError as error:
                st.error(str(error))
        else:
            st.info("No bundled samples in data/samples/.")
    elif source == "Upload":
        upload = st.file_uploader(
            f"A .txt, .md or .pdf file, up to {config.max_upload_mb} MB", type=["txt", "md", "pdf"],
            key="doc_upload",
        )
        if upload is not None:
            try:
                doc = session.read_upload(upload.name, upload.getvalue())
            except session.DocumentError as error:
                st.error(str(error))  # the message names the file and what to do
    else:
        pasted = st.text_area("Paste text", height=180, key="doc_paste")
        if pasted:
            try:
                doc = session.read_paste(pasted)
            except session.DocumentError as error:
                st.error(str(error))

    too_long = False
    if doc is not None:
        limit = min(loaded.max_tokens, config.max_tokens)
        n_tokens = session.token_count(spec, device, doc.text, limit)
        too_long = n_tokens > limit
        st.metric("Tokens / chunks", f"more than {limit:,}" if too_long else
                  f"{n_tokens:,} / {num_chunks(n_tokens):,}",
                  help=f"Chunks of {CHUNK_SIZE} tokens; at most {limit:,} tokens on this server.")
        if too_long:
            st.error(
                f"{doc.name} has more than {limit:,} tokens; this model and server take at most {limit:,}. "
                "Cut the document, or set SPARSEGDN_MAX_TOKENS / pick a model with a longer context."
            )
        with st.expander("Preview"):
            st.text(doc.text[:2000] + ("…" if len(doc.text) > 2000 else ""))
        session.set_document(doc)

# ---- controls ---------------------------------------------------------------------------------
st.subheader("Run")
with st.form("controls"):
    sparse = common.sparse_controls(SparseConfig())
    compare_dense = st.checkbox("Compare with dense (error views)", value=True, key="compare_dense")
    submitted = st.form_submit_button("Run", type="primary", disabled=doc is None or too_long)

if submitted and doc is not None and not too_long:
    run_config = session.RunConfig(sparse, compare_dense=compare_dense, max_tokens=config.max_tokens)
    bar = st.progress(0.0, text="Starting…")

    def show_progress(update):
        bar.progress(min(1.0, max(0.0, float(update.fraction))), text=update.message or update.stage)

    try:
        entry = session.execute(spec, doc, run_config, progress=show_progress)
    except session.RunFailed as error:
        bar.empty()
        st.error(str(error))
    else:
        bar.empty()
        common.show_current_run()
        if entry.source == "cached":
            st.success("Cached result: this document and configuration ran before; shown without recomputing.")
        else:
            st.success(f"Run finished in {entry.seconds:.1f} s.")

# ---- the current result at a glance ----------------------------------------------------------
stored = session.current_run()
if stored is not None:
    st.divider()
    st.subheader("Current result")
    common.run_caption(stored)
    summary = stored.result.summary
    columns = st.columns(4)
    columns[0].metric("Prefill, sparse", common.ms(summary["prefill_ms_sparse"]),
                      common.percent_change(summary["prefill_ms_sparse"], summary.get("prefill_ms_dense")),
                      delta_color="inverse", help=f"Whole model; dense {common.ms(summary.get('prefill_ms_dense'))}")
    if summary.get("kl_mean") is not None:
        columns[1].metric("KL to dense (mean)", f"{summary['kl_mean']:.3g}")
        columns[2].metric("Top-1 agreement", f"{summary['top1_agreement']:.1%}")
        columns[3].metric("Perplexity, sparse", f"{summary['ppl_sparse']:.3f}",
                          common.percent_change(summary["ppl_sparse"], summary["ppl_dense"]), delta_color="inverse",
                          help=f"dense {summary['ppl_dense']:.3f}")
    else:
        columns[1].write("Run with 'compare with dense' for error numbers.")
    st.page_link("views/events.py", label="See the selected events", icon=":material/grid_on:")
session.sync_url()
