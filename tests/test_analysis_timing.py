"""Timing a person can trust (analysis/timing.py): the spread of repeats, differences outside the noise
only, the stages summed by name, and a thread count that does not oversubscribe the machine."""
import pytest

from analysis.timing import Spread, StageClock, choose_threads, difference


def test_a_spread_is_the_median_and_range_of_the_repeats():
    spread = Spread.of([12.0, 10.0, 30.0, None])
    assert spread == Spread(median=12.0, low=10.0, high=30.0, n=3)
    assert Spread.from_dict(spread.to_dict()) == spread
    assert Spread.of([]) is None and Spread.from_dict(None) is None


@pytest.mark.parametrize("new, old, distinct, repeated", [
    ([10, 11, 12], [20, 21, 22], True, True),      # ranges apart: a difference
    ([10, 11, 21], [20, 21, 22], False, True),     # ranges overlap: inside the noise
    ([10], [20, 21, 22], False, False),            # one side measured once: no spread to judge by
])
def test_a_difference_counts_only_outside_the_noise(new, old, distinct, repeated):
    change = difference(Spread.of(new), Spread.of(old))
    assert (change.distinct, change.repeated) == (distinct, repeated)
    assert change.change == pytest.approx(Spread.of(new).median / Spread.of(old).median - 1)
    words = change.describe()
    assert ("within the noise" in words) == (repeated and not distinct)
    assert ("single measurement" in words) == (not repeated)


def test_the_stage_clock_sums_repeated_names_in_stage_order():
    """The torch backend reports intra_solve ... output once per slab after one selection: the totals
    are per name, in the order of sparsegdn.STAGES."""
    clock = StageClock(cuda=False)
    clock.start()
    for name in ["selection"] + ["intra_solve", "event_prepare", "state_pass", "output"] * 3:
        clock.hook(name)
    totals = clock.totals_ms()
    assert list(totals) == ["intra_solve", "selection", "event_prepare", "state_pass", "output"]
    assert all(len(clock.spans[name]) == 3 for name in totals if name != "selection")
    assert totals["output"] == pytest.approx(sum((b - a) * 1e3 for a, b in clock.spans["output"]))


@pytest.mark.parametrize("environ, cores, expected", [
    ({}, 2, 1),                                       # 2 cores: one thread, one core for the rest
    ({}, 16, 15),
    ({}, 1, 1),
    ({"OMP_NUM_THREADS": "2"}, 2, 2),                 # what the person asked for
    ({"SPARSEGDN_THREADS": "3", "OMP_NUM_THREADS": "2"}, 8, 3),
])
def test_the_thread_count_leaves_a_core_free_unless_asked(environ, cores, expected):
    threads, reason = choose_threads(environ, cores)
    assert threads == expected and reason


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_a_bad_thread_count_is_refused_naming_the_variable(raw):
    with pytest.raises(ValueError, match="^SPARSEGDN_THREADS"):
        choose_threads({"SPARSEGDN_THREADS": raw}, 4)


# First-call work inside a timed span (FirstCallWatch): Triton's compile hooks and Autotuner._bench, simulated
# here as Triton 3.6 calls them (triton/runtime/jit.py JITFunction._call_hook, autotuner.Autotuner.run); no
# kernel is compiled on a CPU.

def simulate_compile(name: str, key: str = "key-1"):
    """What JITFunction._do_compile does around one compile: the cache hook (a true answer skips the
    compile), then, having compiled, the post-compile hook. Returns whether it compiled."""
    from triton import knobs
    from triton.runtime.jit import JitFunctionInfo

    kwargs = dict(key=key, repr=f"{name}[num_warps=4](...)", fn=JitFunctionInfo("tests", name, object()),
                  compile={"key": key}, is_manual_warmup=False, already_compiled=False)
    hook = knobs.runtime.jit_cache_hook
    if hook and hook(**kwargs):
        return False
    if knobs.runtime.jit_post_compile_hook:
        knobs.runtime.jit_post_compile_hook(**kwargs)
    return True


class FakeTuner:
    """What Autotuner._bench reads of its Autotuner: the kernel it tunes."""

    def __init__(self, name: str):
        def kernel():
            pass

        kernel.__name__ = name
        self.base_fn = kernel


@pytest.fixture
def triton_hooks(monkeypatch):
    """Hooks someone installed before the watch (they must be chained, then put back) and a stand-in for
    Autotuner._bench whose benchmark compiles its config (as a real one does); the calls each saw."""
    from triton import knobs
    from triton.runtime import autotuner

    seen = {"cache": [], "post": [], "bench": []}
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kwargs: seen["cache"].append(kwargs["key"]))
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", lambda **kwargs: seen["post"].append(kwargs["key"]))

    def bench(tuner, *args, config, **meta):
        seen["bench"].append(config)
        simulate_compile(tuner.base_fn.__name__, key=f"config-{config}")
        return [1.0, 1.0, 1.0]

    monkeypatch.setattr(autotuner.Autotuner, "_bench", bench)
    return seen, (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, bench)


def installed():
    from triton import knobs
    from triton.runtime import autotuner

    return knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, autotuner.Autotuner._bench


def test_the_watch_records_compiles_and_autotune_benchmarks_and_chains_the_hooks(triton_hooks):
    from triton.runtime import autotuner

    from analysis.timing import FirstCallWatch

    seen, before = triton_hooks
    simulate_compile("before_the_watch")                      # not watched: not recorded
    with FirstCallWatch() as watch:
        assert installed() != before
        assert simulate_compile("state_output_kernel")
        assert autotuner.Autotuner._bench(FakeTuner("intra_chunk_kernel"), config="a") == [1.0, 1.0, 1.0]
        autotuner.Autotuner._bench(FakeTuner("intra_chunk_kernel"), config="b")
    assert installed() == before
    # One compile, two config benchmarks; each benchmark's own compile is in its time, not counted again.
    assert [(call.kind, call.kernel) for call in watch.calls] == [
        ("compile", "state_output_kernel"), ("autotune", "intra_chunk_kernel"), ("autotune", "intra_chunk_kernel")]
    assert all(call.seconds >= 0 for call in watch.calls)
    # The hooks installed before were called as ever, inside the watch and out.
    assert seen["cache"] == seen["post"] == ["key-1", "key-1", "config-a", "config-b"]
    assert seen["bench"] == ["a", "b"]


def test_a_cache_hook_that_skips_the_compile_is_obeyed_and_nothing_is_recorded(monkeypatch):
    from triton import knobs

    from analysis.timing import FirstCallWatch

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kwargs: True)
    with FirstCallWatch() as watch:
        assert not simulate_compile("kernel")
    assert watch.calls == [] and knobs.runtime.jit_cache_hook(key=None) is True


def test_the_watch_puts_the_hooks_back_after_an_exception_and_when_nested(triton_hooks):
    from analysis.timing import FirstCallWatch

    _, before = triton_hooks
    with pytest.raises(RuntimeError, match="inside"):
        with FirstCallWatch() as outer:
            with FirstCallWatch() as inner:
                simulate_compile("kernel")
            assert installed() != before                     # the outer watch is still active
            simulate_compile("other_kernel")
            raise RuntimeError("inside")
    assert installed() == before
    assert [call.kernel for call in inner.calls] == ["kernel"]
    assert [call.kernel for call in outer.calls] == ["kernel", "other_kernel"]


def test_without_triton_the_watch_records_nothing_and_the_code_runs(monkeypatch):
    import sys

    from analysis.timing import FirstCallWatch

    monkeypatch.setitem(sys.modules, "triton", None)        # `import triton` raises ImportError
    with FirstCallWatch() as watch:
        total = sum(range(10))
    assert total == 45 and watch.calls == []


def test_first_call_notes_name_the_affected_repeat_and_the_clean_median():
    from analysis.timing import FirstCall, first_call_notes, group_first_calls

    calls = [FirstCall("compile", "state_output_kernel", 6.0), FirstCall("compile", "chunk_output_kernel", 2.5),
             FirstCall("compile", "state_output_kernel", 1.3), FirstCall("autotune", "intra_chunk_kernel", 0.1),
             FirstCall("autotune", "intra_chunk_kernel", 0.2)]
    rows = [{"repeat": 1, "path": "sparse", **row} for row in group_first_calls(calls)]
    assert rows[0] == {"repeat": 1, "path": "sparse", "kind": "compile", "kernel": "state_output_kernel", "count": 2,
                       "seconds": pytest.approx(7.3)}
    clean = Spread.of([80.0, 82.0]).to_dict()
    timing = {"repeats": 3, "first_calls": rows,
              "clean": {"sparse": {"excluded": [1], "prefill": clean, "core": Spread.of([8.0, 8.2]).to_dict()}}}
    notes = first_call_notes(timing)
    assert notes[0] == ("Repeat 2 of 3 of SparseGDN included 3 compiles of 2 kernels (9.8 s: state_output_kernel x2, "
                        "chunk_output_kernel) and autotuning of 1 kernel (0.3 s: intra_chunk_kernel, 2 configs): "
                        "excluded from the clean median.")
    assert notes[1].startswith("SparseGDN without those repeats (clean median of 2): prefill 81.0 ms [80.0-82.0], "
                               "GDN core 8.1 ms [8.0-8.2]")
    timing["clean"]["sparse"].update(prefill=None, core=None)
    assert "no clean median" in first_call_notes(timing)[1]
    assert first_call_notes({"repeats": 3, "first_calls": [], "clean": {}}) == []
    assert first_call_notes({"repeats": 3}) == []           # a run recorded before repeats were watched


def test_the_words_for_the_warm_up_the_stages_source_and_the_plans():
    from analysis.timing import plan_text, stage_source_text, warm_up_text

    warm = {"tokens": 16761, "pieces": [[0, 8192], [8192, 16384], [16384, 16761]], "dense_ms": 79.5, "sparse_ms": 46.25}
    once = "dense 79.5 ms, sparse 46.2 ms on the first 16,761 tokens (3 pieces, the state carried)"
    assert warm_up_text(warm) == once
    assert warm_up_text({**warm, "rounds": 2}) == once + ", 2 rounds (compiling, then recording the launch plans)"
    assert stage_source_text({"stages_apart": False}) == "(median over the repeats)."
    apart = {"stages_apart": True, "staged": {"core_ms": 44.51, "first_calls": []}, "core_sparse": {"median": 21.73}}
    assert "whose GDN core took 44.5 ms against the timed median 21.7 ms" in stage_source_text(apart)
    assert "took" not in stage_source_text({"stages_apart": True, "staged": None})
    assert plan_text({}) is None and plan_text({"planned_calls": [{"repeat": 0, "calls": 8, "replayed": 0}]}) is None
    rows = [{"repeat": 0, "calls": 40, "replayed": 40}, {"repeat": 1, "calls": 40, "replayed": 39}]
    assert plan_text({"planned_calls": rows}).startswith("The timed SparseGDN prefills launched 79 of their 80 core")
