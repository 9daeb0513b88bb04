"""Model and document, controls, run: views 1 and 2. The widgets show this session's choices
(app/choices.py), so leaving the page and coming back finds them as they were."""
import streamlit as st

from analysis import placement
from analysis.pipeline import MAX_REPEATS
from app import choices, session, tables
from app.views import common
from sparsegdn import CHUNK_SIZE, num_chunks

GPU_ONLY = ("qwen3.5-4b-shape",)  # timing preset: a 4B model on CPU would only make people wait

st.title("SparseGDN Explorer")
st.write(
    "Give a Qwen3.5 model a long document and see which recurrent events the SparseGDN selector kept, "
    "what skipping the others cost in error, and what it saved in prefill time."
)
common.explain("run")
config = session.settings()
device = session.device()

# ---- model ------------------------------------------------------------------------------------
model_column, document_column = st.columns([2, 3], gap="large")
with model_column:
    st.subheader("Model")
    try:
        available = [c for c in session.model_choices() if session.cuda_available() or c.spec not in GPU_ONLY]
    except session.ModelError as error:
        st.error(str(error))
        st.stop()
    if not available:
        st.error("No model is available. Check SPARSEGDN_MODEL_ROOTS (see app/README.md).")
        st.stop()
    by_spec = {c.spec: c for c in available}
    specs = list(by_spec)
    chosen = choices.get()
    spec = st.selectbox("Model", specs, index=specs.index(chosen.model) if chosen.model in by_spec else 0,
                        format_func=lambda s: by_spec[s].label, key="model_spec", on_change=choices.remember,
                        args=("model_spec",))
    choices.keep(model=spec)
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
    if len(loaded.placement) > 1:   # spread over GPUs by SPARSEGDN_DEVICE_MAP: which layers sit where
        st.caption(f"Placed over {len(loaded.placement)} GPUs by the `{loaded.device_map}` device map "
                   "(transformers/accelerate); each GDN layer runs its core on its own GPU.")
        st.dataframe(tables.placement_table(placement.peak_memory(loaded.placement)), hide_index=True)

# ---- document ---------------------------------------------------------------------------------
with document_column:
    st.subheader("Document")
    chosen = choices.get()
    source = st.radio("Source", choices.SOURCES, horizontal=True, key="doc_source", on_change=choices.remember,
                      args=("doc_source",), **choices.default("doc_source", index=choices.SOURCES.index(chosen.source)))
    doc = None
    if source == "Bundled sample":
        samples = {s.name: s for s in session.samples()}
        if samples:
            names = list(samples)
            index = names.index(chosen.sample) if chosen.sample in samples else 0
            name = st.selectbox("Sample", names, key="doc_sample", on_change=choices.remember, args=("doc_sample",),
                                **choices.default("doc_sample", index=index),
                                format_func=lambda n: f"{samples[n].title} ({samples[n].n_bytes / 1e3:.0f} KB)")
            st.caption(samples[name].description)
            try:
                doc = session.Document(name, samples[name].read(), origin="sample")
            except session.DocumentError as error:
                st.error(str(error))
        else:
            st.info("No bundled samples in data/samples/.")
    elif source == "Upload":
        upload = st.file_uploader(
            f"A .txt, .md or .pdf file, up to {config.max_upload_mb} MB", type=["txt", "md", "pdf"],
            key="doc_upload",
        )
        kept = session.kept_upload()
        if upload is not None:
            try:
                doc = session.read_upload(upload.name, upload.getvalue())
            except session.DocumentError as error:
                st.error(str(error))  # the message names the file and what to do
        elif kept is not None:
            # The uploader forgets its file when another page runs; the session keeps the document.
            doc = kept
            st.caption(f"Using **{kept.name}**, uploaded earlier in this session. Upload another file to replace it.")
    else:
        pasted = st.text_area("Paste text", value=chosen.pasted, height=180, key="doc_paste",
                              on_change=choices.remember, args=("doc_paste",))
        if pasted:
            try:
                doc = session.read_paste(pasted)   # the upload's rules and size limit
            except session.DocumentError as error:
                st.error(str(error))
    choices.keep(source=source, **({"sample": name} if source == "Bundled sample" and samples else {}),
                 **({"pasted": pasted} if source == "Paste" else {}))

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
    else:       # nothing to run (a refused upload or paste, none given): the sidebar must not name the last document
        session.set_document(None)
    common.show_current_run()

# ---- controls ---------------------------------------------------------------------------------
st.subheader("Run")
chosen = choices.get()
sparse = common.sparse_controls(chosen.sparse, on_change=choices.remember)
left, right = st.columns([1, 2])
compare_dense = left.checkbox("Compare with dense (error views)", value=chosen.compare_dense, key="compare_dense",
                              on_change=choices.remember, args=("compare_dense",))
repeats = right.number_input(
    "Timing repeats", min_value=1, max_value=MAX_REPEATS, value=chosen.repeats, step=1, key="timing_repeats",
    on_change=choices.remember, args=("timing_repeats",),
    help="Timed prefills of each path after the warm-up and the analysis pass; the timings show their "
         "median and range. More repeats take longer and give a truer spread.")
choices.keep(sparse=sparse, compare_dense=compare_dense, repeats=int(repeats))
target = f" on {doc.name}" if doc is not None else ""
submitted = st.button(f"Run{target}", type="primary", disabled=doc is None or too_long, key="run_button")

if submitted and doc is not None and not too_long:
    run_config = session.RunConfig(sparse, compare_dense=compare_dense, max_tokens=config.max_tokens,
                                   repeats=int(repeats))
    bar = st.progress(0.0, text="Starting…")
    log = common.ProgressLog()

    def show_progress(update):
        log(update)
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
            log.show()

# ---- the current result at a glance ----------------------------------------------------------
stored = session.current_run()
if stored is not None:
    st.divider()
    st.subheader("Current result")
    common.run_caption(stored)
    entry = session.current()
    if doc is not None and entry.document_hash not in (None, doc.hash):
        st.warning(f"The current result is of **{entry.document}**; the document above is **{doc.name}**. "
                   f"Run analyses {doc.name}.")
    summary = stored.result.summary
    columns = st.columns(4)
    common.prefill_metric(columns[0], stored.result)
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
