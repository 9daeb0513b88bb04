"""Parts every page shares: the sidebar, the 'no run yet' guard, the summary line."""
from __future__ import annotations

import datetime

import streamlit as st

from app import session
from sparsegdn import OPTIONS, SparseConfig

SOURCE_BADGES = {
    "computed": "computed now",
    "cached": "cached result (same document and configuration ran before)",
    "saved": "saved result (opened from a link)",
    "example": "prepared example (no model loaded)",
}


def sidebar() -> None:
    with st.sidebar:
        # The page runs after the sidebar is drawn: a run it finishes refills this slot (show_current_run).
        st.session_state["_current_run_slot"] = st.empty()
        show_current_run()
        entries = session.history()
        if len(entries) > 1:
            labels = [f"{i + 1}. {e.label} ({e.source})" for i, e in enumerate(entries)]
            chosen = st.selectbox("This session's runs", range(len(entries)), index=len(entries) - 1,
                                  format_func=lambda i: labels[i], key="history_pick")
            if entries[chosen] is not session.current() and st.button("Show this run", key="history_show"):
                try:
                    session.open_entry(entries[chosen])
                    st.rerun()
                except LookupError as error:
                    st.warning(str(error))
        names = session.examples()
        if names:
            st.caption("Prepared examples (open instantly)")
            for name in names:
                if st.button(f"Open example: {name}", key=f"example_{name}"):
                    session.open_example(name)
                    st.rerun()


def sparse_controls(defaults: SparseConfig, *, key_prefix: str = "", label_prefix: str = "",
                    columns: int = 3) -> SparseConfig:
    """One widget per SparseGDN option (sparsegdn.OPTIONS), laid out in `columns` columns; their values
    as a SparseConfig. Keys are `key_prefix + option name`; the widgets offer only allowed values."""
    slots = st.columns(columns)
    values = {}
    for index, option in enumerate(OPTIONS):
        slot, default = slots[index % columns], getattr(defaults, option.name)
        label, key = f"{label_prefix}{option.label}", key_prefix + option.name
        if option.choices and isinstance(default, str):
            values[option.name] = slot.selectbox(label, option.choices, index=option.choices.index(default),
                                                 key=key, help=option.help)
        elif option.choices:
            values[option.name] = slot.select_slider(label, options=option.choices, value=default, key=key,
                                                     help=option.help)
        elif option.high is not None:   # a fraction: from one step above the open lower bound
            values[option.name] = slot.slider(label, option.low + option.step, option.high, default, option.step,
                                              key=key, help=option.help)
        else:
            values[option.name] = slot.number_input(label, min_value=int(option.low), value=default, step=1, key=key,
                                                    help=option.help)
    return SparseConfig(**values)


def show_current_run() -> None:
    """The sidebar's 'Current run' lines, drawn into this script run's slot."""
    slot = st.session_state.get("_current_run_slot")
    if slot is None:
        return
    entry = session.current()
    with slot.container():
        st.caption("Current run")
        if entry is None:
            st.write("none yet")
        else:
            st.write(f"**{entry.label}**")
            st.caption(SOURCE_BADGES.get(entry.source, entry.source))


def require_run():
    """The current StoredRun, or a pointer to the run page and a stop."""
    stored = session.current_run()
    if stored is None:
        if session.current() is not None:
            st.warning("The current run has left the server's cache. Run it again from Model and document.")
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
    created = summary.get("created")
    if isinstance(created, (int, float)):
        created = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="seconds")
    weights = " · **random weights**" if summary.get("random_weights") else ""
    st.caption(
        f"{summary.get('model', '?')}{weights} · {summary.get('n_tokens', '?')} tokens, "
        f"{summary.get('n_chunks', '?')} chunks · budget {summary.get('budget')} · selector "
        f"{summary.get('selector')} · band {summary.get('band')} · backend {summary.get('backend')} · "
        f"device {device_label(summary)} · {source}" + (f" · created {created}" if created else "")
    )


def ms(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f} ms"


def device_label(summary: dict) -> str:
    """Where a run was measured: the card's name when the analysis recorded it."""
    device = str(summary.get("device", "?"))
    name = summary.get("device_name")
    return f"{device} ({name})" if name else device


def percent_change(new, old) -> str | None:
    if new is None or old in (None, 0):
        return None
    return f"{100.0 * (new - old) / old:+.2f}%"
