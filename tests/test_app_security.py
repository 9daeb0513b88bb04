"""Nothing opens that should not: localhost server, capped sizes, checkpoints only from the roots,
links that cannot reach outside the run store, uploads that never touch the disk (issue 7)."""
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from app import settings as app_settings
from app import viewstate
from app.runs import RunStore
from test_app_support import synthetic_result

REPO = Path(__file__).resolve().parents[1]
HOME = str(REPO / "app" / "Home.py")


def test_the_server_listens_on_localhost_and_caps_uploads():
    config = tomllib.loads((REPO / "app" / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"
    # The server refuses bigger files before the app sees them: its cap must not undercut the app's.
    assert config["server"]["maxUploadSize"] == app_settings.Settings.max_upload_mb
    assert config["browser"]["gatherUsageStats"] is False


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from Linux's /proc")
def test_a_server_started_from_another_folder_listens_on_localhost_only(tmp_path):
    """`streamlit run <repo>/app/Home.py` from an empty folder, no flags but the port, no STREAMLIT_*
    variables and a home without a user config: the app's own options still apply."""
    from streamlit_server import listening_addresses, streamlit_server

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with streamlit_server(elsewhere, tmp_path / "server.log", env={"HOME": str(elsewhere)}) as (url, port):
        assert listening_addresses(port) == {"127.0.0.1"}, listening_addresses(port)


# How `streamlit run FILE` loads its options (streamlit.web.cli._main_run): the main script's path
# first, then every config source. Run in a fresh process from another folder, it prints what the
# server started there would use.
LOAD_OPTIONS_AS_STREAMLIT_RUN = """
import json, sys
from streamlit import config
from streamlit.web import bootstrap
config._main_script_path = sys.argv[1]
bootstrap.load_config_options(flag_options={})
print(json.dumps({name: config.get_option(name) for name in sys.argv[2:]}))
"""


def test_the_upload_cap_and_usage_statistics_do_not_depend_on_the_launch_folder(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from app.serving import PROTECTIONS

    env = {name: value for name, value in os.environ.items() if not name.startswith("STREAMLIT_")}
    env["HOME"] = str(tmp_path)
    finished = subprocess.run([sys.executable, "-c", LOAD_OPTIONS_AS_STREAMLIT_RUN, HOME, *PROTECTIONS],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True)
    options = json.loads(finished.stdout)
    assert options == {"server.address": "127.0.0.1", "server.maxUploadSize": app_settings.Settings.max_upload_mb,
                       "browser.gatherUsageStats": False}


def test_the_app_refuses_to_serve_when_its_options_were_not_read():
    from app.serving import PROTECTIONS, unset_protections

    assert unset_protections(lambda option: "<default>") == list(PROTECTIONS.values())
    assert unset_protections(lambda option: "app/.streamlit/config.toml") == []
    only_address = unset_protections(lambda option: "<default>" if option == "server.address" else "flag")
    assert only_address == ["listens on every network interface"]


def test_limits_come_from_the_environment_and_bad_values_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSEGDN_MAX_UPLOAD_MB", "3")
    monkeypatch.setenv("SPARSEGDN_MAX_TOKENS", "4096")
    monkeypatch.setenv("SPARSEGDN_MODEL_ROOTS", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    loaded = app_settings.load_settings()
    assert loaded.max_upload_bytes == 3 * 1024 * 1024 and loaded.max_tokens == 4096
    assert loaded.model_roots == [tmp_path / "a", tmp_path / "b"]
    for raw in ("0", "-5", "lots"):
        monkeypatch.setenv("SPARSEGDN_MAX_TOKENS", raw)
        with pytest.raises(ValueError, match="SPARSEGDN_MAX_TOKENS"):
            app_settings.load_settings()


@pytest.fixture
def outside_checkpoint(tmp_path, monkeypatch):
    """A loadable Qwen3.5 checkpoint that is NOT under the configured (empty) model root."""
    from test_analysis_models import write_checkpoint

    root = tmp_path / "roots"
    root.mkdir()
    outside = write_checkpoint(tmp_path / "elsewhere" / "tiny-qwen35")
    monkeypatch.setenv("SPARSEGDN_MODEL_ROOTS", str(root))
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(tmp_path / "no-examples"))
    monkeypatch.setenv("SPARSEGDN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("SPARSEGDN_DEMO", raising=False)
    monkeypatch.setenv("SPARSEGDN_DEVICE", "cpu")
    return outside


def test_a_path_from_the_browser_never_loads_a_checkpoint_outside_the_roots(outside_checkpoint, monkeypatch):
    import app.session
    from analysis.models import ModelError

    asked = []
    real_load = app.session.load_model

    def recording_load(spec, **kwargs):
        asked.append(spec)
        return real_load(spec, **kwargs)

    monkeypatch.setattr(app.session, "load_model", recording_load)
    app.session._model.clear()
    # Every query parameter a link can carry, and some it cannot, holding the outside path.
    at = AppTest.from_file(HOME, default_timeout=120)
    path = str(outside_checkpoint)
    at.query_params.update({name: path for name in ("model", "spec", "run", "example", "compare", "doc")})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # The model is picked from a list built from the roots; no widget takes a typed path.
    offered = at.selectbox(key="model_spec").options
    assert offered and set(offered) <= {c.label for c in app.session.model_choices()}
    assert not any("tiny-qwen35" in option or path in option for option in offered), offered
    assert len(at.text_input) == 0
    assert path not in asked and asked == ["default"], asked
    # Even a direct call through the app's shared model cache honours the roots.
    with pytest.raises(ModelError, match="outside the model roots"):
        app.session.get_model(path, "cpu")
    assert at.session_state["current"] is None


@settings(max_examples=500, deadline=None)
@given(params=st.dictionaries(st.sampled_from(["run", "example", "compare", "layer", "chunk", "from", "to", "value",
                                               "model"]),
                              st.one_of(st.text(max_size=70), st.lists(st.text(max_size=70), max_size=3),
                                        st.sampled_from(["../../etc", "..", ".", "/etc/passwd", "example:..",
                                                         "example:../x", "0" * 24 + "/..", "%2e%2e"]))))
def test_fuzz_a_link_never_names_a_path(params):
    view = viewstate.parse_view(params)
    for value in (view.run, view.compare, view.example):
        if value is not None:
            assert "/" not in value and "\\" not in value and value.removeprefix("example:") not in (".", "..")
    if view.run is not None:
        assert all(c in "0123456789abcdef" for c in view.run)


def test_the_run_store_never_loads_from_outside_its_directory(tmp_path):
    synthetic_result(n_chunks=4).save(tmp_path / "outside")
    (tmp_path / "runs").mkdir()
    store = RunStore(directory=tmp_path / "runs")
    for key in ("../outside", str(tmp_path / "outside"), "..", "abc/../../outside"):
        assert store.get(key) is None, key


def test_an_upload_stays_in_memory(monkeypatch, tmp_path):
    """Uploaded bytes are read from the widget and parsed in memory: nothing lands in the temp dir."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(tmp_path / "no-examples"))
    monkeypatch.setenv("SPARSEGDN_RUNS_DIR", "")
    monkeypatch.delenv("SPARSEGDN_DEMO", raising=False)
    monkeypatch.setenv("SPARSEGDN_DEVICE", "cpu")
    at = AppTest.from_file(HOME, default_timeout=120)
    at.run()
    at.radio(key="doc_source").set_value("Upload").run()
    at.file_uploader(key="doc_upload").set_value(("private.txt", b"A private note about the harbour. " * 4,
                                                  "text/plain")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["document"].name == "private.txt"
    assert list(scratch.iterdir()) == []
    assert not any(tmp_path.rglob("private*"))


@pytest.mark.parametrize("variable, value, message", [
    ("SPARSEGDN_DEVICE", "nonsense", "Unknown device 'nonsense'"),
    ("SPARSEGDN_DEVICE", "mps", "Unknown device 'mps'"),
    pytest.param("SPARSEGDN_DEVICE", "cuda", "no CUDA GPU is available",
                 marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")),
    ("SPARSEGDN_MAX_TOKENS", "lots", "must be an integer"),
    ("SPARSEGDN_RUN_CACHE", "0", "must be positive"),
    ("SPARSEGDN_MAX_UPLOAD_MB", "-3", "must be positive"),
    ("SPARSEGDN_RUNS_DIR", "{file}", "is a file, not a folder"),
])
@pytest.mark.parametrize("page", ["views/run.py", "views/events.py"])
def test_a_bad_setting_is_one_message_on_every_page(fresh, monkeypatch, variable, value, message, page):
    (fresh / "a-file").write_text("not a folder")
    monkeypatch.setenv(variable, value.format(file=fresh / "a-file"))
    at = AppTest.from_file(HOME, default_timeout=120)
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and variable in errors[0] and message in errors[0], errors
    assert errors[0].startswith("The server's settings are wrong")
