"""Parts every page shares: the sidebar, the 'no run yet' guard, the summary line, the SparseGDN
controls, the teaching notes, and how a timing and its spread are shown."""
from __future__ import annotations

import dataclasses
import datetime
import time

import polars as pl
import streamlit as st

from analysis.timing import Spread, difference
from app import choices, session, tables, teaching
from sparsegdn import OPTIONS, SparseConfig
from sparsegdn.config import usable_sparse_backends

SOURCE_BADGES = {
    "computed": "computed now",
    "cached": "cached result (same document and configuration ran before)",
    "saved": "saved result (opened from a link)",
    "example": "prepared example (no model loaded)",
}


def sidebar() -> None:
    with st.sidebar:
        st.toggle("Teaching mode", value=session.view().teach, key="teaching_toggle", on_change=_on_teaching,
                  help="A short plain-language note beside each view, and the guided tour.")
        # The page runs after the sidebar is drawn: a run it finishes refills this slot (show_current_run).
        st.session_state["_current_run_slot"] = st.empty()
        show_current_run()
        entries = session.history()
        if len(entries) > 1:
            labels = [f"{i + 1}. {e.label} ({e.source})" for i, e in enumerate(entries)]
            # The picker shows the current run, whichever way it became current.
            st.session_state["history_pick"] = _current_index(entries)
            st.selectbox("This session's runs", range(len(entries)), format_func=lambda i: labels[i],
                         key="history_pick", on_change=_on_history_pick)
            if (problem := st.session_state.pop("_history_problem", None)) is not None:
                st.warning(problem)
        names = session.examples()
        if names:
            st.caption("Prepared examples (open instantly)")
            for name in names:
                st.button(f"Open example: {name}", key=f"example_{name}", on_click=open_example, args=(name,))


def _current_index(entries) -> int:
    current = session.current()
    return next((i for i in range(len(entries) - 1, -1, -1) if entries[i] is current), len(entries) - 1)


def _on_history_pick() -> None:
    entries = session.history()
    try:
        session.open_entry(entries[st.session_state["history_pick"]])
    except LookupError as error:
        st.session_state["_history_problem"] = str(error)


def _on_teaching() -> None:
    session.set_view(teach=bool(st.session_state["teaching_toggle"]))


def open_example(name: str) -> None:
    """Open a prepared example and put its document in the Document panel, as if chosen there."""
    session.open_example(name)
    sample = next((s for s in session.samples() if s.example == name), None)
    if sample is not None:
        choices.update(source="Bundled sample", sample=sample.name)
        session.set_document(session.Document(sample.name, sample.read(), origin="sample"))


def explain(page: str) -> None:
    """The page's plain-language note, when teaching mode is on."""
    if session.view().teach:
        st.info(teaching.NOTES[page], icon=":material/school:")


def sparse_controls(defaults: SparseConfig, *, key_prefix: str = "", label_prefix: str = "",
                    columns: int = 3, on_change=None) -> SparseConfig:
    """One widget per SparseGDN option (sparsegdn.OPTIONS), laid out in `columns` columns; their values
    as a SparseConfig. Keys are `key_prefix + option name`; a widget created anew starts at `defaults`;
    the widgets offer only allowed values. `on_change(key)` is called when one changes."""
    slots = st.columns(columns)
    values = {}
    for index, option in enumerate(OPTIONS):
        slot, default, key = slots[index % columns], getattr(defaults, option.name), key_prefix + option.name
        option, default = _offered_here(option, default)
        widget = {"key": key, "help": option.help, "on_change": on_change, "args": (key,) if on_change else None}
        label = f"{label_prefix}{option.label}"
        if option.choices and isinstance(default, str):
            values[option.name] = slot.selectbox(label, option.choices, index=option.choices.index(default), **widget)
        elif option.choices:
            values[option.name] = slot.select_slider(label, options=option.choices, value=default, **widget)
        elif option.high is not None:   # a fraction: from one step above the open lower bound
            values[option.name] = slot.slider(label, option.low + option.step, option.high, default, option.step,
                                              **widget)
        else:
            values[option.name] = slot.number_input(label, min_value=int(option.low), value=default, step=1, **widget)
    return SparseConfig(**values)


def _offered_here(option, default):
    """The backend option with only the backends that can run on this server's device (Triton needs a CUDA GPU,
    or TRITON_INTERPRET=1), its help saying which are left out and why; every other option as it is."""
    if option.name != "backend":
        return option, default
    usable = usable_sparse_backends(session.device())
    left_out = [backend for backend in option.choices if backend not in usable]
    if not left_out:
        return option, default
    note = (f" Not offered here: {', '.join(left_out)} (needs a CUDA GPU and triton, or TRITON_INTERPRET=1; "
            f"this server runs on {session.device()}).")
    return (dataclasses.replace(option, choices=usable, help=option.help + note),
            default if default in usable else usable[0])


def show_current_run() -> None:
    """The sidebar's 'Current run' lines, drawn into this script run's slot."""
    slot = st.session_state.get("_current_run_slot")
    if slot is None:
        return
    entry = session.current()
    document = session.document()
    with slot.container():
        st.caption("Current run")
        if entry is None:
            st.write("none yet")
        else:
            st.write(f"**{entry.label}**")
            st.caption(f"{SOURCE_BADGES.get(entry.source, entry.source)} · document **{entry.document}**")
        if document is not None and (entry is None or entry.document_hash != document.hash):
            st.caption(f"Next run: **{document.name}** (chosen on Model and document)")


def require_run():
    """The current StoredRun, or a pointer to the run page and a stop."""
    stored = session.current_run()
    if stored is None:
        if session.current() is not None:
            st.warning("The current run has left the server's cache. Run it again from Model and document.")
        elif session.missing_link():
            st.warning(f"This link names {session.missing_link()}, which this server does not hold: a run stays "
                       "only while it is in the server's cache (a restart empties it), and examples are those in the "
                       "sidebar. Run the document again from Model and document, or open a prepared example.")
        else:
            st.info("No run yet. Choose a model and a document and run it, or open a prepared example "
                    "from the sidebar.")
        st.page_link("views/run.py", label="Go to Model and document", icon=":material/play_arrow:")
        st.stop()
    return stored


def run_caption(stored) -> None:
    summary = stored.result.summary
    entry = session.current()
    source = SOURCE_BADGES.get(entry.source, entry.source) if entry else ""
    document = entry.document if entry else session.document_of(stored)[0]
    created = created_text(summary)
    weights = " · **random weights**" if summary.get("random_weights") else ""
    st.caption(
        f"**{document}** · {summary.get('model', '?')}{weights} · {summary.get('n_tokens', '?')} tokens, "
        f"{summary.get('n_chunks', '?')} chunks · {session.options_label(summary)} · "
        f"backend {summary.get('backend')} · "
        f"device {device_label(summary)} · {source}" + (f" · created {created}" if created else "")
    )


def passkey_outcome(stored, slot=st) -> None:
    """Whether dense and the sparse run retrieved the passkey the document hides (teaching.PASSKEY), when it
    hides one: the answer each predicted at the end against the expected one."""
    if not stored.text or len(teaching.PASSKEY.findall(stored.text)) < 2:
        return
    outcome = tables.passkey_outcome(stored.text, stored.result.tokens, teaching.PASSKEY)
    if outcome is None:
        slot.caption("This document hides a passkey, but this run was recorded before the model's predictions were "
                     "kept: run it again to see whether the passkey was retrieved.")
        return
    columns = slot.columns(3)
    columns[0].metric("Passkey in the document", outcome["expected"])
    for column, path, name in zip(columns[1:], ("dense", "sparse"), ("Dense answered", "Sparse answered")):
        answer = outcome[path]
        if answer is None:
            column.metric(name, "—", help="No dense pass in this run ('compare with dense' off).")
        else:
            column.metric(name, answer["answer"] or "(nothing)",
                          "retrieved" if answer["retrieved"] else "lost", delta_color="normal" if answer["retrieved"]
                          else "inverse", delta_arrow="off")
    slot.caption("The model's most likely next token at each position of the answer after the question at the end "
                 "(teacher-forced: it reads the true digits before each one). Retrieved means every token matches.")


def tour_layer_note(result, chunk: int, favourable: int) -> str:
    """Why the tour opens on `favourable` and how the passkey's chunk fared in every layer, from the records:
    the most favourable layer is not a typical one, and the note says so."""
    kept = tables.chunk_kept_by_layer(result.events, chunk)
    best = kept.filter(pl.col("layer") == favourable).row(0, named=True)
    others = "; ".join(f"layer {r['layer']}: {r['kept']} of {r['head_pairs']}" for r in kept.iter_rows(named=True)
                       if r["layer"] != favourable)
    note = (f"The tour opens on layer {favourable} because it is the **most favourable** layer for the passkey: "
            f"{best['kept']} of {best['head_pairs']} head pairs kept its chunk {chunk} there. It is not typical; "
            f"in the other layers: {others}. Pick another layer above to see it.")
    if tables.has_error(result.layers):
        worst = result.layers.sort("rel_err_o", descending=True, nulls_last=True).row(0, named=True)
        note += (f" The largest relative output error of any layer is layer {worst['layer']}'s, "
                 f"{worst['rel_err_o']:.2f} (Error versus dense).")
    return note


# The caveat of every view that sets timings of different runs beside each other (Timings, Compare).
TIMINGS_APART = ("Timings of different runs were taken at different moments, perhaps on different machines: the "
                 "machine's other work, its clocks and what ran before differ, so they are not comparable as if "
                 "measured together. Each run's first-call cost (compilation, autotuning, first use) is measured "
                 "apart and left out of its figures; where some still landed inside a timed repeat, the Timings "
                 "page says which repeat and gives the medians without it.")


def how_timed(summary: dict) -> str:
    """Where, when and how a run's timings were taken, in one sentence (markdown)."""
    timing = summary.get("timing")
    if timing:
        warm = timing.get("warm_up", {})
        how = (f"each figure is the median of {timing['repeats']} interleaved repeats (range beside it), taken "
               f"after a warm-up on the first {warm.get('tokens', '?'):,} tokens that is not counted; "
               f"{timing['threads']} CPU thread(s)")
    else:
        how = ("one unrepeated measurement per path: this run was recorded before timings were repeated, so it "
               "has no spread")
    return f"Measured on **{device_label(summary)}** on {created_text(summary) or 'an unrecorded date'}: {how}."


def created_text(summary: dict) -> str | None:
    """When a run was made, as an ISO date and time (saved runs may hold a Unix time)."""
    created = summary.get("created")
    if isinstance(created, (int, float)):
        created = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="seconds")
    return created


def ms(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f} ms"


def spread_help(spread: Spread | None) -> str:
    if spread is None:
        return "One measurement: this run was recorded before timings were repeated, so it has no spread."
    if spread.n < 2:
        return "One measurement (1 repeat): no spread."
    return f"Median of {spread.n} repeats; range {spread.low:,.1f}–{spread.high:,.1f} ms."


def timing_metric(slot, label: str, new: Spread | None, old: Spread | None = None, *, median=None,
                  old_median=None, digits: int = 1) -> None:
    """A timing, its range, and its change against `old`: coloured only when the ranges of two repeated
    measurements do not overlap; inside the noise, or unrepeated, the change is said in words beneath."""
    new = new or (Spread(median, median, median, 0) if median is not None else None)
    old = old or (Spread(old_median, old_median, old_median, 0) if old_median is not None else None)
    change = difference(new, old)
    delta = f"{change.change:+.1%}" if change is not None and change.distinct else None
    slot.metric(label, ms(new.median if new else None, digits), delta, delta_color="inverse",
                help=spread_help(new if new and new.n else None))
    if new is not None and new.n >= 2:
        slot.caption(f"range {new.low:,.{digits}f}–{new.high:,.{digits}f} ms, {new.n} repeats")
    if change is not None and not change.distinct:
        slot.caption(change.describe().replace("within the noise", "within the noise: no difference shown"))


def prefill_metric(slot, result, label: str = "Prefill, sparse") -> None:
    """The whole sparse prefill against the dense one, as timing_metric shows it."""
    spreads = tables.timing_spreads(result)
    timing_metric(slot, label, spreads.get("prefill_sparse"), spreads.get("prefill_dense"),
                  median=result.summary.get("prefill_ms_sparse"), old_median=result.summary.get("prefill_ms_dense"))
    if (result.summary.get("timing") or {}).get("clean"):
        slot.caption("Includes first-call work (compiling, autotuning) in a timed repeat: the Timings page says "
                     "which, with the medians without it.")


def attention_caption(attention: list[int]) -> None:
    if attention:
        names = ", ".join(str(layer) for layer in attention)
        st.caption(f"Layer{'s' if len(attention) > 1 else ''} {names}: attention, not Gated DeltaNet: no GDN core, "
                   "so no events, errors or core times there (the grey bands).")


def device_label(summary: dict) -> str:
    """Where a run was measured: the card's name when the analysis recorded it."""
    device = str(summary.get("device", "?"))
    name = summary.get("device_name")
    return f"{device} ({name})" if name else device


def percent_change(new, old) -> str | None:
    if new is None or old in (None, 0):
        return None
    return f"{100.0 * (new - old) / old:+.2f}%"


class ProgressLog:
    """The phases of a run as they were reported (warm-up, analysis, timing), with their wall time."""

    def __init__(self):
        self.phases: list[list] = []   # [stage, first message, started, ended]

    def __call__(self, update) -> None:
        now = time.perf_counter()
        phase = {"dense": "analysis", "sparse": "analysis", "segment": "analysis"}.get(update.stage, update.stage)
        if phase in ("tokenize", "done", "waiting"):
            return
        if self.phases and self.phases[-1][0] == phase:
            self.phases[-1][3] = now
        else:
            if self.phases:
                self.phases[-1][3] = now
            self.phases.append([phase, update.message, now, now])

    def show(self) -> None:
        names = {"warmup": "warm-up (not timed)", "analysis": "analysis (events, errors; not timed)",
                 "timing": "timing repeats"}
        lines = [f"- {names.get(p[0], p[0])}: {p[3] - p[2]:.1f} s" + (f" — {p[1]}" if p[0] == "warmup" else "")
                 for p in self.phases]
        with st.expander("How this run went", expanded=False):
            st.markdown("\n".join(lines))
