import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """App tests: no demo, no examples, runs kept in memory only, every test starts on the run page."""
    monkeypatch.setenv("SPARSEGDN_EXAMPLES_DIR", str(tmp_path / "no-examples"))
    monkeypatch.setenv("SPARSEGDN_RUNS_DIR", "")
    monkeypatch.delenv("SPARSEGDN_DEMO", raising=False)
    monkeypatch.setenv("SPARSEGDN_DEVICE", "cpu")
    import app.session

    app.session._run_store.clear()  # each test starts with no stored runs (the model stays loaded)
    return tmp_path
