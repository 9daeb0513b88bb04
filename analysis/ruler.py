"""RULER-style long-context tasks in miniature: needles and variable chains hidden in a haystack.

A sample is one token sequence: haystack text with needle lines inserted at seeded depths, a
question, and the answer appended (teacher forcing). `answer_spans` are the token ranges that are
scored: a span counts as retrieved when the model's argmax predicts every token of it, which for a
single answer at the end is exactly greedy decoding. Tasks (after RULER, Hsieh et al. 2024):

  niah_single        one needle, asked for its value
  niah_multikey      one needle among distractor needles with other keys
  niah_multivalue    several needles share one key; all values asked, in order of appearance
  niah_multiquery    several needles with distinct keys; every key asked (one value per query)
  variable_tracking  a chain VAR A = 12345, VAR B = VAR A, ...; all names holding the value asked

Lengths are exact: every sample has `length` tokens. Haystacks come from a token array
(the held-out split for evaluation, the training split for training), cut at line starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "variable_tracking")
LENGTHS = (4096, 8192, 16384, 32768)

# Keys are two words joined by a hyphen ("amber-harbor"): rare in the haystack as a pair.
KEY_WORDS_FIRST = (
    "amber", "ancient", "bitter", "bold", "brave", "bright", "broken", "calm", "clever", "cold",
    "copper", "crimson", "crystal", "dark", "distant", "dusty", "eager", "early", "empty", "fading",
    "fierce", "frozen", "gentle", "gilded", "golden", "green", "hidden", "hollow", "honest", "humble",
    "iron", "ivory", "jolly", "lazy", "little", "lonely", "lucky", "marble", "mellow", "misty",
    "noble", "olive", "pale", "patient", "plain", "proud", "purple", "quiet", "rapid", "restless",
    "rusty", "scarlet", "secret", "silent", "silver", "sleepy", "slow", "smooth", "solemn", "sturdy",
    "swift", "tender", "tiny", "velvet", "violet", "wandering", "wild", "winter", "wooden", "young",
)
KEY_WORDS_SECOND = (
    "anchor", "apple", "arrow", "badger", "banner", "barrel", "beacon", "bell", "bridge", "candle",
    "canyon", "castle", "cedar", "comet", "compass", "cottage", "crane", "desert", "dragon", "falcon",
    "feather", "fiddle", "forest", "fountain", "garden", "glacier", "harbor", "hammer", "heron", "island",
    "kettle", "ladder", "lantern", "lemon", "lighthouse", "meadow", "mirror", "mountain", "needle", "orchard",
    "otter", "parrot", "pebble", "pillar", "planet", "pocket", "rabbit", "raven", "river", "saddle",
    "sparrow", "spindle", "statue", "teapot", "thimble", "thistle", "tiger", "tower", "trumpet", "tulip",
    "valley", "violin", "wagon", "walnut", "whistle", "willow", "window", "wolf", "zephyr", "oyster",
)
UPPER = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))


@dataclass(frozen=True)
class RulerSample:
    """One sequence of `length` tokens; `answer_spans` are [start, end) token ranges to predict."""

    task: str
    length: int
    seed: int
    input_ids: np.ndarray          # int64 [length]
    answer_spans: tuple[tuple[int, int], ...]
    answers: tuple[str, ...]
    needle_starts: tuple[int, ...]  # token index where each needle line begins


@dataclass(frozen=True)
class _Parts:
    needles: list[str]             # lines inserted in the haystack, in order of depth
    question: str
    answer: list[tuple[str, bool]]  # (text, scored) segments appended after the question
    answers: list[str]


def _value(rng: np.random.Generator, digits: int) -> str:
    return str(int(rng.integers(10 ** (digits - 1), 10 ** digits)))


def _keys(rng: np.random.Generator, count: int) -> list[str]:
    first = rng.choice(len(KEY_WORDS_FIRST), size=count, replace=False)
    second = rng.choice(len(KEY_WORDS_SECOND), size=count, replace=False)
    return [f"{KEY_WORDS_FIRST[a]}-{KEY_WORDS_SECOND[b]}" for a, b in zip(first, second)]


def _needle(key: str, value: str) -> str:
    return f"The special magic number for {key} is: {value}.\n"


def _niah(rng, needles: int, queries: int, same_key: bool) -> _Parts:
    """Needles with keys and 7-digit values; `queries` of the distinct keys are asked."""
    keys = _keys(rng, 1 if same_key else needles)
    keys = keys * needles if same_key else keys
    values = [_value(rng, 7) for _ in range(needles)]
    if same_key:
        key = keys[0]
        answer = []
        for i, value in enumerate(values):
            answer += [(" " + value, True), ("," if i < needles - 1 else ".", False)]
        return _Parts([_needle(k, v) for k, v in zip(keys, values)],
                      f"What are all the special magic numbers for {key}? The special magic numbers for {key} are:",
                      answer, values)
    asked = sorted(rng.choice(needles, size=queries, replace=False).tolist(), key=lambda _: rng.random())
    if queries == 1:
        i = asked[0]
        return _Parts([_needle(k, v) for k, v in zip(keys, values)],
                      f"What is the special magic number for {keys[i]}? The special magic number for {keys[i]} is:",
                      [(" " + values[i], True), (".", False)], [values[i]])
    names = ", ".join(keys[i] for i in asked[:-1]) + f" and {keys[asked[-1]]}"
    answer = []
    for j, i in enumerate(asked):
        answer += [(f" The special magic number for {keys[i]} is:", False),
                   (" " + values[i], True), (".", False)]
    return _Parts([_needle(k, v) for k, v in zip(keys, values)],
                  f"What are the special magic numbers for {names}?", answer, [values[i] for i in asked])


def _variable_tracking(rng, hops: int) -> _Parts:
    """One chain of hops + 1 variables holding a 5-digit value, defined in order through the text."""
    names: list[str] = []
    while len(names) < hops + 1:
        name = "".join(rng.choice(UPPER, size=5))
        if name not in names:
            names.append(name)
    value = _value(rng, 5)
    needles = [f"VAR {names[0]} = {value}.\n"] + [f"VAR {b} = VAR {a}.\n" for a, b in zip(names, names[1:])]
    answer = []
    for i, name in enumerate(names):
        answer += [(" " + name, True), ("," if i < len(names) - 1 else ".", False)]
    return _Parts(needles, f"Find all variables that are assigned the value {value}. "
                           f"The variables assigned the value {value} are:", answer, names)


def task_parts(task: str, rng: np.random.Generator, *, needles: int | None = None,
               queries: int | None = None) -> _Parts:
    """The text of a task; `needles` and `queries` override RULER's defaults (used in training)."""
    if task == "niah_single":
        return _niah(rng, 1, 1, same_key=False)
    if task == "niah_multikey":
        return _niah(rng, needles or 4, 1, same_key=False)
    if task == "niah_multivalue":
        return _niah(rng, needles or 4, 1, same_key=True)
    if task == "niah_multiquery":
        n = needles or 4
        return _niah(rng, n, min(queries or n, n), same_key=False)
    if task == "variable_tracking":
        return _variable_tracking(rng, hops=(needles - 1) if needles else 4)
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


class RulerGenerator:
    """Builds samples from a `tokenizers.Tokenizer` and a haystack of token ids (uint16/int array)."""

    def __init__(self, tokenizer, haystack: np.ndarray):
        self.tokenizer = getattr(tokenizer, "backend_tokenizer", tokenizer)
        self.haystack = np.asarray(haystack, dtype=np.int64)
        vocab = self.tokenizer.get_vocab()
        line_end = [i for i in vocab.values() if self.tokenizer.decode([i]).endswith("\n")]
        # positions right after a line end: needles go there so they read as lines of their own
        self.line_starts = np.flatnonzero(np.isin(self.haystack, line_end)) + 1
        if len(self.line_starts) == 0:
            raise ValueError("haystack has no line ends")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def sample(self, task: str, length: int, seed: int, *, needles: int | None = None,
               queries: int | None = None, depths: np.ndarray | None = None) -> RulerSample:
        """A sample of exactly `length` tokens; the same (task, length, seed) gives the same tokens."""
        rng = np.random.default_rng([seed, length, TASKS.index(task)])
        parts = task_parts(task, rng, needles=needles, queries=queries)
        needle_ids = [self.encode(n) for n in parts.needles]
        question_ids = self.encode("\n" + parts.question)
        answer_ids = [(self.encode(text), scored) for text, scored in parts.answer]
        tail = len(question_ids) + sum(len(ids) for ids, _ in answer_ids)
        hay_len = length - tail - sum(len(ids) for ids in needle_ids)
        if hay_len < 16:
            raise ValueError(f"length {length} too short for task {task}")
        # a window of the haystack that starts at a line start
        candidates = self.line_starts[self.line_starts + hay_len <= len(self.haystack)]
        start = int(candidates[rng.integers(len(candidates))]) if len(candidates) else 0
        hay = self.haystack[start:start + hay_len]
        if len(hay) < hay_len:  # haystack shorter than asked: repeat it
            hay = np.resize(self.haystack, hay_len)
        # insertion points: line starts inside the window nearest to the drawn depths, in order
        if depths is None:
            depths = np.sort(rng.uniform(0.0, 1.0, size=len(needle_ids)))
        local = self.line_starts[(self.line_starts > start) & (self.line_starts < start + hay_len)] - start
        cuts = []
        for d in depths:
            want = int(d * hay_len)
            cuts.append(int(local[np.abs(local - want).argmin()]) if len(local) else want)
        cuts = np.maximum.accumulate(np.asarray(cuts, dtype=np.int64))

        pieces, starts, pos, prev = [], [], 0, 0
        for cut, ids in zip(cuts, needle_ids):
            pieces.append(hay[prev:cut])
            pos += cut - prev
            starts.append(pos)
            pieces.append(np.asarray(ids, dtype=np.int64))
            pos += len(ids)
            prev = cut
        pieces.append(hay[prev:])
        pieces.append(np.asarray(question_ids, dtype=np.int64))
        pos += hay_len - prev + len(question_ids)
        spans = []
        for ids, scored in answer_ids:
            if scored:
                spans.append((pos, pos + len(ids)))
            pieces.append(np.asarray(ids, dtype=np.int64))
            pos += len(ids)
        input_ids = np.concatenate(pieces)
        assert len(input_ids) == length == pos
        return RulerSample(task, length, seed, input_ids, tuple(spans), tuple(parts.answers), tuple(starts))


def span_hits(sample: RulerSample, predicted: np.ndarray) -> list[bool]:
    """Per answer span: did the argmax at the previous positions predict every token of it?

    `predicted[t]` is the model's argmax after reading tokens 0..t (so it guesses token t + 1).
    """
    return [bool(np.array_equal(predicted[a - 1:b - 1], sample.input_ids[a:b])) for a, b in sample.answer_spans]
