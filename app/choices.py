"""What this browser session chose on the run page: the model, where the document comes from, SparseGDN's
options and the run's. Kept in one place, st.session_state["choices"], that every page reads.

Streamlit forgets a widget's value when a script run does not draw it, so leaving "Model and document"
and coming back would reset its widgets. Each widget here is bound to a field of `Choices`: drawn from
it (`restore`) and written back to it (`keep`) on every run of the page, so the widgets show the
session's choices whichever page was open in between.
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


def _value(choices: Choices, key: str):
    return getattr(choices.sparse, key) if key in SPARSE_WIDGETS else getattr(choices, WIDGETS[key])


def restore(*keys: str) -> None:
    """Give each widget key its chosen value unless the widget holds one already (call before drawing)."""
    choices = get()
    for key in keys:
        if key not in st.session_state:
            st.session_state[key] = _value(choices, key)


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
    """Change choices from elsewhere (a sidebar button): the widgets bound to them show the new values
    (call from a callback, before the widgets are drawn)."""
    choices = keep(**values)
    for key, name in WIDGETS.items():
        if name in values:
            st.session_state[key] = getattr(choices, name)
    if "sparse" in values:
        for key in SPARSE_WIDGETS:
            st.session_state[key] = getattr(choices.sparse, key)
    return choices
