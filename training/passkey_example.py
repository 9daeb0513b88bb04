"""Pick the passkey example's document from the evaluation, by a fixed rule: a needle `score` keeps and `uniform` loses.

    python training/passkey_example.py                      # reads analysis/results/ruler.json, 4K tokens
    python training/passkey_example.py --length 8192 --dry-run

The rule (no hand picking): among the evaluation's niah_single samples at --length (held-out Milton
haystack, one needle), take in seed order those that dense and `score` (SparseConfig's default budget,
band 1) retrieved and `uniform` (same budget and band) lost; re-check each on its text as the app
tokenizes it, with the committed default model on this machine (the three settings through
analysis/patching.py); write the first that still behaves so to data/samples/passkey-haystack.txt and
say so in data/samples/index.json. The counts of every case (both kept, only score, only uniform,
neither) are printed and written into the description, so the example is shown for what it is. When no
sample qualifies, nothing is written. Regenerate the prepared example afterwards (app/README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import evaluation  # noqa: E402
from analysis.evaluation import Setting  # noqa: E402
from analysis.ruler import RulerGenerator, RulerSample  # noqa: E402
from sparsegdn import SparseConfig  # noqa: E402

MODEL_DIR = ROOT / "data" / "default-model"
RESULTS = ROOT / "analysis" / "results" / "ruler.json"
SAMPLES = ROOT / "data" / "samples"
DOCUMENT = "passkey-haystack.txt"
TASK = "niah_single"


def settings(backend: str = "torch") -> dict[str, Setting]:
    """dense, score and uniform at SparseConfig's default budget, band 1."""
    return {"dense": evaluation.DENSE,
            **{s: Setting(SparseConfig(selector=s, band=1, backend=backend)) for s in ("score", "uniform")}}


def outcomes(results: dict, length: int) -> tuple[list[int], dict[str, int]]:
    """Seeds of the samples dense and score retrieved and uniform lost, in seed order, and how many samples
    fell in each case. The evaluation's sample i has seed `seed` + i."""
    wanted = {name: s.name for name, s in settings().items()}
    scores = {}
    for r in results["records"]:
        if r["kind"] == "ruler" and r["task"] == TASK and r["length"] == length and r["config"] in wanted.values():
            scores[r["config"]] = r["sample_scores"]
    missing = [name for name, config in wanted.items() if config not in scores]
    if missing:
        raise SystemExit(f"the evaluation has no {TASK} scores at {length} tokens for {', '.join(missing)}")
    dense, score, uniform = (np.asarray(scores[wanted[n]]) == 1.0 for n in ("dense", "score", "uniform"))
    first = int(results.get("seed", 0))
    counts = {"samples": len(dense), "dense retrieved": int(dense.sum()),
              "score and uniform kept": int((dense & score & uniform).sum()),
              "score kept, uniform lost": int((dense & score & ~uniform).sum()),
              "uniform kept, score lost": int((dense & ~score & uniform).sum()),
              "both lost": int((dense & ~score & ~uniform).sum())}
    return [first + i for i in np.flatnonzero(dense & score & ~uniform)], counts


def as_the_app_reads_it(sample: RulerSample, tokenizer) -> tuple[str, RulerSample]:
    """The sample's text, and the sample as the app tokenizes that text (answer spans counted from the end,
    where the answer stands)."""
    text = tokenizer.decode(sample.input_ids.tolist())
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    shift = len(ids) - sample.length
    spans = tuple((a + shift, b + shift) for a, b in sample.answer_spans)
    return text, RulerSample(sample.task, len(ids), sample.seed, ids, spans, sample.answers,
                             tuple(s + shift for s in sample.needle_starts))


def recheck(model, sample: RulerSample) -> dict[str, bool]:
    """Whether each setting retrieves the sample's answer on this machine."""
    found = {}
    for name, setting in settings().items():
        with evaluation.swapped(model, setting):
            found[name] = evaluation.score_batch(model, [sample], "cpu")[0] == 1.0
    return found


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--heldout", type=Path, default=ROOT / "data" / "corpus" / "heldout.npz")
    parser.add_argument("--dry-run", action="store_true", help="print the pick, write nothing")
    args = parser.parse_args(argv)
    from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM

    results = json.loads(args.results.read_text())
    digest = evaluation.checkpoint_digest(MODEL_DIR / "model.safetensors")
    if results.get("checkpoint_sha256") != digest:
        raise SystemExit(f"{args.results} did not evaluate {MODEL_DIR}/model.safetensors: evaluate it first")
    seeds, counts = outcomes(results, args.length)
    print(f"[passkey] {TASK} at {args.length} tokens: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(MODEL_DIR / "tokenizer.json"))
    generator = RulerGenerator(tokenizer, np.load(args.heldout)["milton"])
    model = Qwen3_5ForCausalLM.from_pretrained(str(MODEL_DIR), dtype=torch.float32).eval()
    for seed in seeds:
        text, sample = as_the_app_reads_it(generator.sample(TASK, args.length, seed), tokenizer)
        (a, b), = sample.answer_spans
        if tokenizer.decode(sample.input_ids[a:b].tolist()).strip() != sample.answers[0]:
            print(f"[passkey] seed {seed}: the answer tokenizes differently in the text; skipped")
            continue
        found = recheck(model, sample)
        print(f"[passkey] seed {seed}: re-checked on this machine: {found}")
        if found == {"dense": True, "score": True, "uniform": False}:
            break
    else:
        raise SystemExit("[passkey] no sample is kept by score and lost by uniform here: the example stays as it is")
    budget = SparseConfig().budget
    description = (f"A held-out Milton haystack of {sample.length} tokens with one needle (\"{sample.answers[0]}\") "
                   f"and the question at the end, followed by the answer: the evaluation's {TASK} sample of seed "
                   f"{seed}, picked by training/passkey_example.py because dense and score (budget {budget:g}, band 1) "
                   f"retrieve it and uniform loses it, in the evaluation ({results.get('device', '?')}, "
                   f"{results.get('backend', '?')} backend) and again on the CPU (torch backend) as the app reads the "
                   f"text. Of the evaluation's {counts['samples']} such samples, dense "
                   f"retrieved {counts['dense retrieved']}; score kept and uniform lost {counts['score kept, uniform lost']}, "
                   f"the reverse {counts['uniform kept, score lost']}, both kept {counts['score and uniform kept']}, "
                   f"both lost {counts['both lost']}.")
    print(f"[passkey] {description}")
    if args.dry_run:
        return
    (SAMPLES / DOCUMENT).write_text(text)
    index = json.loads((SAMPLES / "index.json").read_text())
    for entry in index:
        if entry["file"] == DOCUMENT:
            entry["title"] = "Passkey in a haystack (held-out RULER sample)"
            entry["description"] = description
    (SAMPLES / "index.json").write_text("[\n" + ",\n".join("  " + json.dumps(e) for e in index) + "\n]\n")
    print(f"[passkey] wrote {SAMPLES / DOCUMENT}; now regenerate data/examples/passkey-haystack (app/README.md)")


if __name__ == "__main__":
    main()
