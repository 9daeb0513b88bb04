"""The option space is defined once (sparsegdn/config.py) and everything that offers an option reads it there."""
import argparse
import dataclasses

import pytest

import sparsegdn
from analysis.cli import add_sparse_options, sparse_options
from analysis.errors import ConfigError
from sparsegdn import OPTIONS, SparseConfig
from sparsegdn.config import resolve_dense_backend, resolve_sparse_backend


def test_the_options_describe_exactly_the_config_fields_in_order():
    assert [option.name for option in OPTIONS] == [f.name for f in dataclasses.fields(SparseConfig)]
    choices = {option.name: option.choices for option in OPTIONS}
    assert choices["selector"] == sparsegdn.SELECTORS
    assert choices["band"] == sparsegdn.BANDS == (0, 1, 2, 3)
    assert choices["backend"] == sparsegdn.SPARSE_BACKENDS


def test_chunks_follow_the_chunk_size():
    assert sparsegdn.CHUNK_SIZE == 64
    assert [sparsegdn.num_chunks(t) for t in (1, 64, 65, 128, 129)] == [1, 1, 2, 2, 3]


def test_a_config_is_frozen_hashable_and_normalised():
    import numpy as np

    config = SparseConfig(budget=np.float64(0.5), band=np.int64(3))
    assert type(config.budget) is float and type(config.band) is int
    assert hash(config) == hash(SparseConfig(budget=0.5, band=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.budget = 0.1
    assert SparseConfig.from_dict({**config.to_dict(), "compare_dense": True}) == config
    with pytest.raises(ValueError, match="^budget"):
        config.replace(budget=2.0)


def test_auto_resolves_to_the_reference_on_the_cpu_and_a_resolved_config_is_itself():
    config = SparseConfig()
    resolved = config.resolved("cpu")
    assert resolved.backend == "torch" and resolved.resolved("cpu") is resolved
    assert resolve_dense_backend("auto", "cpu") == "torch"
    with pytest.raises(ValueError, match="^backend"):
        resolve_dense_backend("fla", "cpu")
    with pytest.raises(ValueError, match="^backend"):
        resolve_sparse_backend("cuda", "cpu")


def test_the_cli_flags_are_generated_from_the_options():
    parser = argparse.ArgumentParser()
    add_sparse_options(parser)
    flags = {action.dest for action in parser._actions} - {"help"}
    assert flags == {option.name for option in OPTIONS}
    args = parser.parse_args(["--budget", "0.5", "--selector", "random", "--seed", "7"])
    assert sparse_options(args) == SparseConfig(budget=0.5, selector="random", seed=7)
    with pytest.raises(ConfigError, match="^selector"):
        sparse_options(parser.parse_args(["--selector", "best"]))


def test_the_selector_and_band_help_explains_every_value():
    """The help the app's controls and the CLI's flags show says what each selector and each band means."""
    from sparsegdn import BANDS, SELECTORS
    from sparsegdn.config import BAND_MEANINGS, SELECTOR_MEANINGS

    options = {option.name: option for option in OPTIONS}
    assert set(SELECTOR_MEANINGS) == set(SELECTORS) and set(BAND_MEANINGS) == set(BANDS)
    for name, meanings in (("selector", SELECTOR_MEANINGS), ("band", BAND_MEANINGS)):
        for value, meaning in meanings.items():
            assert f"{value}: {meaning}" in options[name].help, (name, value)
