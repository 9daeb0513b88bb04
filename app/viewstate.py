"""The view state that a link carries: which run, layer, chunk and chunk window are shown.

The page itself is the URL path (st.navigation); the rest is the query string, e.g.
`/events?run=3f2a…&layer=5&chunk=120&from=96&to=160&value=score`; `teach=1` turns teaching mode on
and `step=N` is the guided tour's step. Parsing is forgiving:
a link that names something this server no longer has opens the default view, never fails.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from app.runs import is_run_key

# What the events heatmap can colour by, and the words the control and the figure use for each.
VALUE_LABELS = {"selected": "selected", "score": "selector score", "rel_err_o": "output error"}
VALUES = tuple(VALUE_LABELS)
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}$")  # a folder name, never "." or ".."


@dataclass(frozen=True)
class View:
    run: str | None = None  # key of a run in the run store
    example: str | None = None  # name of a prepared example (data/examples/<name>)
    compare: str | None = None  # key of the second run on the Compare page (or "example:<name>")
    layer: int | None = None
    chunk: int | None = None
    window_start: int | None = None  # chunk window [start, end) of the per-layer heatmap
    window_end: int | None = None
    value: str = "selected"
    teach: bool = False  # teaching mode: a plain-language note beside each view
    step: int | None = None  # the guided tour's step (0 = the first)

    def with_(self, **changes) -> "View":
        return replace(self, **changes)


_PARAM_NAMES = {"window_start": "from", "window_end": "to"}


def _example_key(value: str) -> bool:
    """A prepared example as a run key ("example:<name>"), as the Compare page may hold one."""
    return value.startswith("example:") and bool(_NAME.match(value.removeprefix("example:")))


def _first(value) -> str:
    if isinstance(value, (list, tuple)):
        return str(value[0]) if value else ""
    return str(value)


def _int(raw: str) -> int | None:
    try:
        number = int(raw)
    except ValueError:
        return None
    return number if number >= 0 else None


def parse_view(params: Mapping[str, object]) -> View:
    """Read a View from query parameters; unknown or malformed values are dropped."""
    raw = {key: _first(value) for key, value in params.items()}
    run = raw.get("run", "").lower()
    example = raw.get("example", "")
    compare = raw.get("compare", "")
    value = raw.get("value", "selected")
    view = View(
        run=run if is_run_key(run) else None,
        example=example if _NAME.match(example) else None,
        compare=compare if is_run_key(compare) or _example_key(compare) else None,
        layer=_int(raw.get("layer", "")),
        chunk=_int(raw.get("chunk", "")),
        window_start=_int(raw.get("from", "")),
        window_end=_int(raw.get("to", "")),
        value=value if value in VALUES else "selected",
        teach=raw.get("teach", "") == "1",
        step=_int(raw.get("step", "")),
    )
    if view.window_start is not None and view.window_end is not None and view.window_end <= view.window_start:
        view = view.with_(window_start=None, window_end=None)
    return view


def view_to_params(view: View) -> dict[str, str]:
    """Query parameters for a View; defaults are left out so links stay short."""
    params: dict[str, str] = {}
    for name, value in asdict(view).items():
        if value is None or value is False or (name == "value" and value == "selected"):
            continue
        params[_PARAM_NAMES.get(name, name)] = "1" if value is True else str(value)
    return params


def clamp(view: View, n_layers: int, n_chunks: int, layers: list[int] | None = None) -> View:
    """Fit a View to a run: layer among `layers`, chunk and window inside the document."""
    layer = view.layer
    if layers:
        layer = layer if layer in layers else layers[0]
    elif layer is not None and layer >= n_layers:
        layer = None
    chunk = view.chunk if view.chunk is not None and view.chunk < n_chunks else None
    start, end = view.window_start, view.window_end
    if start is not None and end is not None:
        end = min(end, n_chunks)
        if start >= end:
            start = end = None
    else:
        start = end = None
    return view.with_(layer=layer, chunk=chunk, window_start=start, window_end=end)
