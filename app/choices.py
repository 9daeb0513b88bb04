"""What this browser session chose on the run page: the model, where the document comes from, SparseGDN's
options and the run's. Kept in one place, st.session_state["choices"], that every page reads.

Streamlit forgets a widget's value when a script run does not draw it, so leaving "Model and document"
and coming back would reset its widgets. Each widget there is drawn with its value from `Choices`
(`value=`/`index=`, used whenever the widget is created anew) and writes each change back at once
(`remember`, its on_change), so the widgets show the session's choices whichever page ran in between.
Only `update` (a choice made elsewhere) sets a widget's value through st.session_state: a value set
that way can be lost when a run is interrupted by the next one, and the widget then starts at its own
default, so the run page's own widgets never rely on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import streamlit as st

from analysis.pipeline import RunConfig
from sparsegdn import OPTIONS, SparseConfig

SOURCES = ("Bundled sample", "Upload", "Paste")
DEFAULT_SAMPLE = "gated-deltanet-notes.md"


@dataclass(frozen=True)
class Choices:
    model: str = "default"                   # a load_model spec
    source: str = SOURCES[0]
    sample: str = DEFAULT_SAMPLE             # file name of the bundled sample
    pasted: str = ""
    sparse: SparseConfig = field(default_factory=SparseConfig)
    compare_dense: bool = True
    repeats: int = RunConfig.repeats


# widget key -> the field of Choices it shows; SparseGDN's options use their own names as keys
WIDGETS = {"model_spec": "model", "doc_source": "source", "doc_sample": "sample", "doc_paste": "pasted",
           "compare_dense": "compare_dense", "timing_repeats": "repeats"}
SPARSE_WIDGETS = tuple(option.name for option in OPTIONS)


def get() -> Choices:
    return st.session_state.setdefault("choices", Choices())


def remember(key: str) -> None:
    """on_change of a bound widget: record its new value before the page's script runs, so a choice
    survives even when another page is opened before that run ends (it would stop the run)."""
    value = st.session_state[key]
    if key in SPARSE_WIDGETS:
        keep(sparse=get().sparse.replace(**{key: value}))
    else:
        keep(**{WIDGETS[key]: value})


def keep(**values) -> Choices:
    """Record what the widgets hold now: fields of Choices by name."""
    st.session_state["choices"] = replace(get(), **values)
    return st.session_state["choices"]


def update(**values) -> Choices:
    """Change choices from elsewhere (a sidebar button; call from a callback, before the widgets are
    drawn): the widgets bound to them are given the new values through st.session_state, so a widget on
    screen shows them too (see `default`)."""
    choices = keep(**values)
    pending = st.session_state.setdefault("_choices_pending", set())
    for key, name in WIDGETS.items():
        if name in values:
            st.session_state[key] = getattr(choices, name)
            pending.add(key)
    if "sparse" in values:
        for key in SPARSE_WIDGETS:
            st.session_state[key] = getattr(choices.sparse, key)
            pending.add(key)
    return choices


def default(key: str, **value) -> dict:
    """The `value=` or `index=` to draw widget `key` with: `value`, unless `update` has just put the
    widget's new value in st.session_state (Streamlit then takes it from there, and warns when given both)."""
    pending = st.session_state.get("_choices_pending", set())
    if key in pending:
        pending.discard(key)
        return {}
    return value
