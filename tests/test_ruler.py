"""The RULER-style generator: exact lengths, needles in the text, answers recoverable, seeded."""

import corpus_stand_in
import numpy as np
import pytest

from analysis.ruler import TASKS, RulerGenerator, span_hits


@pytest.fixture(scope="module")
def tokenizer():
    return corpus_stand_in.tokenizer()


@pytest.fixture(scope="module")
def generator(tokenizer):
    return RulerGenerator(tokenizer, corpus_stand_in.haystack())


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", [1024, 4096])
def test_sample_has_exact_length_and_answers_at_its_spans(generator, tokenizer, task, length):
    sample = generator.sample(task, length, seed=3)
    assert sample.input_ids.shape == (length,), f"{task}: {sample.input_ids.shape} != {length}"
    assert len(sample.answer_spans) == len(sample.answers) >= 1
    for (a, b), answer in zip(sample.answer_spans, sample.answers):
        assert tokenizer.decode(sample.input_ids[a:b].tolist()).strip() == answer
    # answers come last, after every needle
    assert min(a for a, _ in sample.answer_spans) > max(sample.needle_starts)


@pytest.mark.parametrize("task", TASKS)
def test_every_answer_is_written_in_the_text_before_the_question(generator, tokenizer, task):
    sample = generator.sample(task, 2048, seed=11)
    question_start = min(a for a, _ in sample.answer_spans)
    context = tokenizer.decode(sample.input_ids[:question_start].tolist())
    for start in sample.needle_starts:
        needle = tokenizer.decode(sample.input_ids[start:start + 12].tolist())
        assert needle.startswith(("The special magic number", "VAR ")), needle
    for answer in sample.answers:
        if task == "variable_tracking":
            assert f"VAR {answer} = " in context, f"variable {answer} not defined in the text"
        else:
            assert f"is: {answer}." in context, f"value {answer} not in a needle"


def test_variable_chain_is_linked_in_order(generator, tokenizer):
    sample = generator.sample("variable_tracking", 2048, seed=5)
    text = tokenizer.decode(sample.input_ids.tolist())
    names = sample.answers
    for first, second in zip(names, names[1:]):
        assert f"VAR {second} = VAR {first}." in text
        assert text.index(f"VAR {first} =") < text.index(f"VAR {second} =")


def test_same_seed_same_tokens_other_seed_other_tokens(generator):
    a = generator.sample("niah_multikey", 2048, seed=7)
    b = generator.sample("niah_multikey", 2048, seed=7)
    c = generator.sample("niah_multikey", 2048, seed=8)
    assert np.array_equal(a.input_ids, b.input_ids) and a.answers == b.answers
    assert not np.array_equal(a.input_ids, c.input_ids)


def test_needle_depths_follow_the_requested_depths(generator):
    for depth in (0.1, 0.5, 0.9):
        sample = generator.sample("niah_single", 4096, seed=1, depths=np.array([depth]))
        where = sample.needle_starts[0] / 4096
        assert abs(where - depth) < 0.05, f"needle at {where:.3f}, asked {depth}"


def test_span_hits_need_every_token_of_a_span(generator):
    sample = generator.sample("niah_multivalue", 2048, seed=2)
    perfect = np.roll(sample.input_ids, -1)       # predicted[t] guesses token t + 1
    assert span_hits(sample, perfect) == [True] * len(sample.answers)
    (a, b) = sample.answer_spans[1]
    wrong = perfect.copy()
    wrong[b - 2] = (wrong[b - 2] + 1) % 1000      # last token of the second value
    assert span_hits(sample, wrong) == [True, False] + [True] * (len(sample.answers) - 2)


def test_too_short_length_is_refused(generator):
    with pytest.raises(ValueError, match="too short"):
        generator.sample("niah_multiquery", 64, seed=0)
