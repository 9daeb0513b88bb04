"""analyze(): records with the documented columns, consistent counts, exactness at full budget."""
from __future__ import annotations

import json
import math

import polars as pl
import pytest

import sparsegdn
from sparsegdn import SparseConfig
from analysis import recorder as recorder_module
from analysis.errors import ConfigError, DocumentTooLongError, NonFiniteError
from analysis.pipeline import ProgressUpdate, RunConfig, analyze
from analysis.records import SCHEMAS, SUMMARY_KEYS, RunResult, document_hash
from test_analysis_support import tiny_loaded

TEXT = ("The gated delta rule writes each token into a state and decays it. " * 8
        + "Ünïcödé text keeps its character offsets straight. ") * 3    # multi-byte chars


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded(seed=1)


@pytest.fixture(scope="module")
def sparse_run(loaded):
    return analyze(loaded, TEXT, RunConfig(SparseConfig(budget=0.29, selector="score", band=1, backend="torch")))


def test_records_have_the_documented_columns(sparse_run):
    for table, schema in SCHEMAS.items():
        assert dict(getattr(sparse_run, table).schema) == schema, table
    assert set(SUMMARY_KEYS) <= set(sparse_run.summary)


def test_summary_has_the_sparse_core_stage_times(sparse_run):
    stages = sparse_run.summary["stages"]
    assert [s["stage"] for s in stages] == list(sparsegdn.STAGES)
    assert all(s["ms"] > 0 for s in stages) and math.isclose(sum(s["share"] for s in stages), 1.0)
    # the stages are inside the core's intervals: in every repeat (one clock, no statistic between them; the
    # summary's medians of stages and of core totals come from different repeats, so they are not compared)
    sparse = sparse_run.timings.filter(pl.col("path") == "sparse")
    for repeat in sparse["repeat"].unique().to_list():
        rows = sparse.filter(pl.col("repeat") == repeat)
        staged = rows.filter(pl.col("scope") == "stage")["ms"].sum()
        assert 0 < staged <= rows.filter(pl.col("scope") == "core")["ms"].sum() + 1e-3, repeat
    assert sparse_run.summary["device_name"] == "CPU"


def test_counts_are_consistent(loaded, sparse_run):
    n_tokens = len(TEXT.encode("utf-8"))
    n_chunks = math.ceil(n_tokens / 64)
    hv = loaded.head_pairs
    s = sparse_run.summary
    assert (s["n_tokens"], s["n_chunks"]) == (n_tokens, n_chunks)
    events = sparse_run.events
    assert events.height == len(loaded.gdn_layers) * hv * n_chunks
    per_layer = events.group_by("layer").agg(pl.col("selected").sum()).sort("layer")
    expected = math.ceil(0.29 * hv * n_chunks)
    assert expected == sparsegdn.event_count(0.29, hv, n_chunks)
    assert per_layer["layer"].to_list() == loaded.gdn_layers
    assert per_layer["selected"].to_list() == [expected] * len(loaded.gdn_layers)
    assert sparse_run.heads["events_selected"].sum() == expected * len(loaded.gdn_layers)
    assert sparse_run.chunks.height == n_chunks
    assert sparse_run.chunks["token_end"].max() == n_tokens
    assert sparse_run.layers["layer"].to_list() == loaded.gdn_layers


def test_chunk_character_spans_cover_the_document(sparse_run):
    chunks = sparse_run.chunks
    assert chunks["char_start"][0] == 0 and chunks["char_end"][-1] == len(TEXT)
    # Consecutive chunks meet (or overlap by the one character a chunk boundary splits).
    starts, ends = chunks["char_start"].to_list(), chunks["char_end"].to_list()
    assert all(0 <= ends[i] - starts[i + 1] <= 1 for i in range(len(starts) - 1))
    assert "".join(sparse_run.chunk_text(c) for c in range(3)).startswith(TEXT[:100])


def test_sparse_run_has_errors_and_model_metrics(sparse_run):
    s = sparse_run.summary
    assert 0 < s["kl_mean"] and 0 <= s["top1_agreement"] <= 1
    assert s["ppl_dense"] > 1 and s["ppl_sparse"] > 1
    assert s["prefill_ms_dense"] > 0 and s["prefill_ms_sparse"] > 0
    assert sparse_run.heads["rel_err_o"].max() > 1e-4          # skipped events cost something
    assert sparse_run.events.filter(pl.col("rel_err_o").is_null()).height == 0
    assert (sparse_run.layers["core_ms_dense"] > 0).all() and (sparse_run.layers["core_ms_sparse"] > 0).all()
    assert s["non_finite"] == 0


def test_tokens_record_each_paths_next_token_prediction(loaded, sparse_run):
    """The tokens table: one row per token, its own id and span, and each path's top-1 next token, whose
    agreement is the summary's top-1 agreement and whose text is the tokenizer's."""
    tokens = sparse_run.tokens
    assert tokens["position"].to_list() == list(range(sparse_run.summary["n_tokens"]))
    assert tokens["token"].to_list() == loaded.tokenizer.encode(TEXT)
    assert TEXT[tokens["char_start"][5]:tokens["char_end"][5]] == loaded.tokenizer.decode([tokens["token"][5]])
    agreement = (tokens["predicted_dense"] == tokens["predicted_sparse"]).mean()
    assert agreement == pytest.approx(sparse_run.summary["top1_agreement"]), agreement
    assert agreement < 1.0     # skipped events changed some predictions: the two columns are not one copy
    for path in ("dense", "sparse"):
        first = tokens.row(0, named=True)
        assert first[f"predicted_{path}_text"] == loaded.tokenizer.decode([first[f"predicted_{path}"]])


def test_tokens_record_without_dense_has_null_dense_predictions(loaded):
    result = analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="torch"), compare_dense=False, repeats=1))
    assert result.tokens["predicted_dense"].null_count() == result.tokens.height
    assert result.tokens["predicted_sparse"].null_count() == 0


def test_full_budget_band3_matches_dense(loaded):
    result = analyze(loaded, TEXT, RunConfig(SparseConfig(budget=1.0, band=3, backend="torch")))
    s = result.summary
    assert s["kl_mean"] < 1e-9 and s["top1_agreement"] == 1.0
    assert abs(s["ppl_dense"] - s["ppl_sparse"]) <= 1e-6 * s["ppl_dense"]
    assert result.events["selected"].all()
    assert result.heads["rel_err_o"].max() < 1e-5
    assert result.heads["rel_err_state"].max() < 1e-5


def test_segments_carry_the_state(loaded):
    """Three segments of 128 tokens give the same model metrics as one pass (full budget)."""
    one = analyze(loaded, TEXT, RunConfig(SparseConfig(budget=1.0, band=3, backend="torch")))
    three = analyze(loaded, TEXT, RunConfig(SparseConfig(budget=1.0, band=3, backend="torch"), segment_tokens=128))
    assert three.summary["n_segments"] == math.ceil(len(TEXT.encode()) / 128)
    assert abs(one.summary["ppl_sparse"] - three.summary["ppl_sparse"]) <= 1e-4 * one.summary["ppl_sparse"]
    assert three.events.select("layer", "head_pair", "chunk").equals(one.events.select("layer", "head_pair", "chunk"))


def test_a_model_of_gdn_layers_only_runs_in_segments():
    """Every layer Gated DeltaNet (no attention layer): transformers cannot measure such a cache, so the
    segments pass their positions (models.segment_inputs); three segments give one pass's metrics."""
    gdn_only = tiny_loaded(seed=2, gdn_only=True)
    assert gdn_only.gdn_layers == [0, 1, 2, 3]
    one = analyze(gdn_only, TEXT, RunConfig(SparseConfig(budget=1.0, band=3, backend="torch")))
    three = analyze(gdn_only, TEXT, RunConfig(SparseConfig(budget=1.0, band=3, backend="torch"), segment_tokens=128))
    assert three.summary["n_segments"] == math.ceil(len(TEXT.encode()) / 128) > 1
    assert abs(one.summary["ppl_sparse"] - three.summary["ppl_sparse"]) <= 1e-4 * one.summary["ppl_sparse"]
    assert abs(one.summary["ppl_dense"] - three.summary["ppl_dense"]) <= 1e-4 * one.summary["ppl_dense"]


def test_without_dense_comparison_errors_are_null(loaded):
    result = analyze(loaded, TEXT, RunConfig(SparseConfig(backend="torch"), compare_dense=False))
    s = result.summary
    assert s["kl_mean"] is None and s["ppl_dense"] is None and s["prefill_ms_dense"] is None
    assert s["ppl_sparse"] > 1
    assert result.events["rel_err_o"].null_count() == result.events.height
    assert result.heads["rel_err_state"].null_count() == result.heads.height


def test_progress_is_reported_per_layer_and_segment(loaded):
    updates: list[ProgressUpdate] = []
    config = RunConfig(SparseConfig(backend="torch"), segment_tokens=256, repeats=2)
    analyze(loaded, TEXT, config, progress=updates.append)
    n_segments = math.ceil(len(TEXT.encode()) / 256)
    layer_updates = [u for u in updates if u.stage in ("dense", "sparse") and u.layer is not None]
    assert len(layer_updates) == n_segments * 2 * loaded.n_layers
    timing_updates = [u for u in updates if u.stage == "timing" and u.layer is not None]
    assert len(timing_updates) == config.repeats * 2 * n_segments * loaded.n_layers
    assert len([u for u in updates if u.stage == "segment"]) == n_segments
    fractions = [u.fraction for u in updates]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and updates[-1].stage == "done"


def test_the_warm_up_is_reported_and_moves_the_progress(loaded):
    """The warm-up (compilation, first use) is said as such and advances the bar: it never sits at 0."""
    updates: list[ProgressUpdate] = []
    analyze(loaded, TEXT, RunConfig(SparseConfig(backend="torch"), repeats=1), progress=updates.append)
    warm = [u for u in updates if u.stage == "warmup"]
    assert warm and "warming up" in warm[0].message and "not timed" in warm[0].message
    first_analysis = next(i for i, u in enumerate(updates) if u.stage in ("dense", "sparse"))
    assert all(u.stage in ("tokenize", "warmup") for u in updates[:first_analysis])
    assert 0 < updates[first_analysis - 1].fraction < 1


def test_on_a_gpu_the_timed_prefills_carry_no_stage_clock_and_the_stages_come_from_one_more(loaded, monkeypatch):
    """Where calls take launch plans (the Triton backend on a GPU; forced here on the CPU): a call with the stage
    hook takes no plan, so the warm-up and the timed sparse prefills run without it, the warm-up twice (compile, then
    record the plans), and the stage times come from one more sparse prefill after the timed ones, whose time is no
    repeat's. Each timed repeat counts its core calls replayed from a plan (call_plans.replays' change: faked here,
    one a call without the clock)."""
    from analysis import pipeline
    from analysis.timing import plan_text, stage_source_text

    monkeypatch.setattr(pipeline, "_plans_taken", lambda run: True)
    replays = [0]
    monkeypatch.setattr(pipeline, "_plan_replays", lambda: replays[0])
    clocks = []
    made = pipeline.sparse_core

    def spy(config, checks, stages=None):
        clocks.append(stages is not None)
        core = made(config, checks, stages)

        def counted(call):
            replays[0] += stages is None
            return core(call)
        return counted

    monkeypatch.setattr(pipeline, "sparse_core", spy)
    updates: list[ProgressUpdate] = []
    result = analyze(loaded, TEXT, RunConfig(SparseConfig(backend="torch"), repeats=2), progress=updates.append)
    assert clocks == [False, False, False, True]        # warm-up, two timed repeats, then the staged prefill
    timings, timing = result.timings, result.summary["timing"]
    assert timing["stages_apart"] is True and timing["warm_up"]["rounds"] == 2
    stages = timings.filter(pl.col("scope") == "stage")
    assert set(stages["stage"]) == set(sparsegdn.STAGES) and stages["repeat"].unique().to_list() == [2]
    assert sorted(timings.filter(pl.col("scope") == "prefill")["repeat"].to_list()) == [0, 0, 1, 1]
    assert timing["core_sparse"]["n"] == 2 and [s["stage"] for s in result.summary["stages"]] == list(sparsegdn.STAGES)
    assert timing["staged"]["core_ms"] > 0 and timing["staged"]["first_calls"] == []
    assert f"{timing['staged']['core_ms']:,.1f} ms" in stage_source_text(timing)
    calls = len(loaded.gdn_layers)                      # one segment: one core call a GDN layer
    assert timing["planned_calls"] == [{"repeat": 0, "calls": calls, "replayed": calls},
                                       {"repeat": 1, "calls": calls, "replayed": calls}]
    assert f"{2 * calls} of their {2 * calls} core calls" in plan_text(timing)
    # the progress total counts both warm-up rounds and the staged prefill: 1 is reached at its end only
    staged = [u for u in updates if u.message and u.message.startswith("stage times")]
    assert staged and all(u.stage == "timing" for u in staged) and staged[0].fraction < 0.999
    fractions = [u.fraction for u in updates]
    assert fractions == sorted(fractions) and fractions[-2] == pytest.approx(1.0), fractions[-4:]


def test_timings_are_repeated_and_summarised_by_their_spread(loaded):
    result = analyze(loaded, TEXT, RunConfig(SparseConfig(backend="torch"), repeats=3))
    timings, timing = result.timings, result.summary["timing"]
    assert sorted(timings.filter(pl.col("scope") == "prefill")["repeat"].to_list()) == [0, 0, 1, 1, 2, 2]
    assert timings.filter(pl.col("scope") == "core")["layer"].unique().sort().to_list() == loaded.gdn_layers
    assert timing["repeats"] == 3 and timing["threads"] >= 1 and timing["warm_up"]["tokens"] > 0
    # the torch backend takes no launch plan: the stages come from the timed prefills, after one warm-up round
    assert timing["stages_apart"] is False and timing["staged"] is None and timing["warm_up"]["rounds"] == 1
    assert [row["replayed"] for row in timing["planned_calls"]] == [0, 0, 0]
    for name in ("prefill_dense", "prefill_sparse", "core_dense", "core_sparse"):
        spread = timing[name]
        assert spread["n"] == 3 and spread["low"] <= spread["median"] <= spread["high"], (name, spread)
    prefill = timings.filter((pl.col("scope") == "prefill") & (pl.col("path") == "dense"))["ms"]
    assert result.summary["prefill_ms_dense"] == timing["prefill_dense"]["median"] == prefill.median()
    per_layer = timings.filter((pl.col("scope") == "core") & (pl.col("path") == "sparse")).group_by("layer").agg(
        pl.col("ms").median()).sort("layer")
    assert result.layers.sort("layer")["core_ms_sparse"].to_list() == per_layer["ms"].to_list()
    stages = timings.filter(pl.col("scope") == "stage")
    assert set(stages["stage"]) == set(sparsegdn.STAGES) and (stages["path"] == "sparse").all()
    # Nothing compiles on a CPU: every repeat is clean, and the records say so.
    assert (timings["first_calls"] == 0).all() and timing["first_calls"] == [] and timing["clean"] == {}


def test_a_compile_inside_a_timed_repeat_is_recorded_and_kept_out_of_the_clean_median(loaded, tmp_path):
    """A Triton compile (simulated through Triton's own hooks) during the second timed SparseGDN prefill: that
    repeat's records say so, with the kernel, and the summary gives the median without it beside the one over
    all; the CLI says which repeat and what it held."""
    import io

    from analysis.cli import print_summary
    from test_analysis_timing import simulate_compile

    def progress(update):
        if update.stage == "timing" and update.layer is None and update.message.startswith("timing 2/2: SparseGDN"):
            simulate_compile("state_output_kernel")

    result = analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="torch"), repeats=2), progress=progress)
    timings, timing = result.timings, result.summary["timing"]
    # Every row of a repeat (prefill, each layer's core, each stage) carries its count.
    assert set(timings.select("repeat", "path", "first_calls").unique().iter_rows()) == {
        (0, "dense", 0), (0, "sparse", 0), (1, "dense", 0), (1, "sparse", 1)}
    [row] = timing["first_calls"]
    assert (row["repeat"], row["path"], row["kind"], row["kernel"], row["count"]) == (
        1, "sparse", "compile", "state_output_kernel", 1) and row["seconds"] >= 0
    clean_prefill = timings.filter((pl.col("scope") == "prefill") & (pl.col("path") == "sparse")
                                   & (pl.col("repeat") == 0))["ms"].item()
    assert set(timing["clean"]) == {"sparse"} and timing["clean"]["sparse"]["excluded"] == [1]
    assert timing["clean"]["sparse"]["prefill"] == {"median": clean_prefill, "low": clean_prefill,
                                                    "high": clean_prefill, "n": 1}
    assert timing["prefill_sparse"]["n"] == 2                  # the median over all is still there, not replaced
    loaded_back = RunResult.load(result.save(tmp_path / "run"))
    assert loaded_back.timings["first_calls"].to_list() == timings["first_calls"].to_list()
    out = io.StringIO()
    print_summary(result.summary, tmp_path / "run", out)
    text = out.getvalue()
    assert "Repeat 2 of 2 of SparseGDN included 1 compile of 1 kernel (" in text and "state_output_kernel" in text
    prefill = next(line for line in text.splitlines() if line.startswith("prefill"))
    assert prefill.count("includes first-call work") == 1 and "(torch core), sparse" in prefill


def test_the_warm_up_runs_the_timed_call_over_each_kind_of_segment(loaded, monkeypatch):
    """The warm-up calls the sparse core exactly as the timing passes do (stage hook, deferred checks), with
    the state carried into a second piece, so a timed call meets no call shape the warm-up did not."""
    from analysis import patching

    real, calls = sparsegdn.sparse_gated_delta_rule, []

    def spy(*args, **kwargs):
        calls.append((kwargs.get("initial_state") is not None, kwargs.get("stage_hook") is not None,
                      kwargs.get("checks") is not None))
        return real(*args, **kwargs)

    monkeypatch.setattr(patching.sparsegdn, "sparse_gated_delta_rule", spy)
    result = analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="torch"), segment_tokens=128, repeats=1,
                                                   compare_dense=False))
    assert result.summary["timing"]["warm_up"]["pieces"] == [[0, 96], [96, 128]]
    layers = len(loaded.gdn_layers)
    warm_up, timed = calls[:2 * layers], calls[-3 * layers:]          # 2 pieces, then 3 timed segments
    assert warm_up == [(False, True, True)] * layers + [(True, True, True)] * layers
    assert set(timed) == {(False, True, True), (True, True, True)}
    assert all(call[1] is False for call in calls[2 * layers:-3 * layers])   # the analysis pass: the recorder


@pytest.mark.parametrize("device, lengths, pieces", [
    ("cuda", [8192] * 4 + [377], [(0, 8192), (8192, 16384), (16384, 16761)]),   # first, a full one, the last's length
    ("cuda", [8192, 100], [(0, 8192), (8192, 8292)]),
    ("cuda", [8192] * 3, [(0, 8192), (8192, 16384)]),          # the last is a full one: met by the second
    ("cuda", [500], [(0, 500)]),
    ("cpu", [8192] * 3, [(0, 96), (96, 128)]),
    ("cpu", [100], [(0, 100)]),
])
def test_the_warm_up_pieces_cover_each_kind_of_segment(device, lengths, pieces):
    import torch

    from analysis.pipeline import _warm_up_pieces

    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    segments = [(start, start + length) for start, length in zip(starts, lengths)]
    assert _warm_up_pieces(segments, torch.device(device)) == pieces


def test_a_run_names_its_document(loaded):
    result = analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="torch"), repeats=1), document_name="notes.md")
    assert result.summary["document"] == "notes.md"
    assert result.summary["document_sha256"] == document_hash(TEXT[:300])


def test_save_and_load_round_trip(sparse_run, tmp_path):
    sparse_run.save(tmp_path / "run")
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == ["chunks.parquet", "document.txt", "events.parquet", "heads.parquet", "layers.parquet",
                     "summary.json", "timings.parquet", "tokens.parquet"]
    back = RunResult.load(tmp_path / "run")
    for table in SCHEMAS:
        assert getattr(back, table).equals(getattr(sparse_run, table)), table
    assert back.summary == json.loads(json.dumps(sparse_run.summary))
    assert back.document == TEXT


def test_document_longer_than_the_limit_is_refused(loaded):
    with pytest.raises(DocumentTooLongError, match="tokens"):
        analyze(loaded, TEXT, RunConfig(max_tokens=100))


@pytest.mark.parametrize("bad", [dict(segment_tokens=100), dict(segment_tokens=0), dict(max_tokens=0),
                                 dict(sparse={"budget": 0.5}), dict(repeats=0), dict(repeats=21), dict(repeats=2.0)])
def test_bad_run_settings_are_refused(bad):
    with pytest.raises(ConfigError):
        RunConfig(**bad)


@pytest.mark.parametrize("bad", [dict(budget=0), dict(budget=1.5), dict(band=4), dict(selector="best"),
                                 dict(backend="cuda")])
def test_a_saved_config_with_bad_options_is_refused_as_a_config_error(bad):
    with pytest.raises(ConfigError, match=rf"^{next(iter(bad))}\b"):
        RunConfig.from_dict({**RunConfig().to_dict(), **bad})


def test_run_config_is_hashable_and_round_trips_through_its_dict():
    config = RunConfig(SparseConfig(budget=0.5, selector="random", seed=3), segment_tokens=128)
    assert hash(config) == hash(RunConfig(SparseConfig(budget=0.5, selector="random", seed=3), segment_tokens=128))
    assert config.to_dict()["budget"] == 0.5 and RunConfig.from_dict(config.to_dict()) == config
    assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_triton_where_it_cannot_run_is_a_config_error(loaded, monkeypatch):
    monkeypatch.setattr(sparsegdn.config, "triton_available", lambda: False)
    with pytest.raises(ConfigError, match="^backend"):
        analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="triton")))


def test_non_finite_core_output_is_an_error(loaded, monkeypatch):
    real = sparsegdn.sparse_gated_delta_rule

    def poisoned(*args, **kwargs):
        o, state, info = real(*args, **kwargs)
        return o * float("nan"), state, info

    monkeypatch.setattr(recorder_module.sparsegdn, "sparse_gated_delta_rule", poisoned)
    with pytest.raises(NonFiniteError):
        analyze(loaded, TEXT[:300], RunConfig(SparseConfig(backend="torch")))


def test_a_document_over_the_token_limit_is_refused_before_it_is_tokenised_whole():
    from analysis.documents import SAMPLES_DIR
    from analysis.models import load_model
    from test_analysis_models import spy_on_encode

    loaded = load_model("default")
    text = (SAMPLES_DIR / "passkey-haystack.txt").read_text(encoding="utf-8") * 200     # ~2.6 M characters
    seen = spy_on_encode(loaded.tokenizer)
    whole = []
    loaded.tokenizer.encode_with_offsets = lambda text: whole.append(len(text))
    with pytest.raises(DocumentTooLongError, match="more than 1,000 tokens"):
        analyze(loaded, text, RunConfig(max_tokens=1000))
    assert not whole and sum(seen) < len(text) / 20
