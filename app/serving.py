"""The server options that protect the app, whatever folder the server is started from.

Streamlit reads `.streamlit/config.toml` from the current folder and from the main script's folder;
the app's options live in `app/.streamlit/config.toml`, beside `Home.py`, so
`streamlit run <repo>/app/Home.py` gets them from anywhere: localhost only, uploads capped at the
app's limit, no usage statistics. A flag, a STREAMLIT_* variable or another config file can still
change each of them on purpose (STREAMLIT_SERVER_ADDRESS=0.0.0.0 exposes the server).

`unset_protections` is the last line of defence: an option still at Streamlit's own default means no
config file set it (the file was deleted, or Home.py was copied elsewhere); the app then refuses to
serve rather than listen on every interface.
"""
from __future__ import annotations

from collections.abc import Callable

PROTECTIONS = {
    "server.address": "listens on every network interface",
    "server.maxUploadSize": "accepts uploads of 200 MB",
    "browser.gatherUsageStats": "sends usage statistics to Streamlit",
}
DEFAULT = "<default>"   # what streamlit.config.get_where_defined says of an option nobody set


def unset_protections(where_defined: Callable[[str], str]) -> list[str]:
    """What the server does because an option in PROTECTIONS was left at Streamlit's default."""
    return [consequence for option, consequence in PROTECTIONS.items() if where_defined(option) == DEFAULT]


def server_problem() -> str | None:
    """A message when this server runs without the app's options; None when they are set (or when
    AppTest runs the script, which starts no server)."""
    from streamlit import config

    if config.get_option("global.appTest"):
        return None
    unset = unset_protections(config.get_where_defined)
    if not unset:
        return None
    return ("This server was started without the app's settings (app/.streamlit/config.toml), so it "
            f"{' and '.join(unset)}. Start it with `streamlit run app/Home.py` from a copy of the "
            "repository, or set these options explicitly.")
