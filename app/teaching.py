"""Teaching mode: a short plain-language note for each view, and the steps of the guided tour through the
passkey example. Words only; the figures and the numbers the tour quotes come from the run's records."""
import re


NOTES = {
    "run": (
        "A language model reads a document and keeps a running memory of it. In Gated DeltaNet layers that "
        "memory is a small matrix per *head pair*, updated every 64 tokens (a *chunk*). Updating one head "
        "pair's memory with one chunk is an **event**. SparseGDN keeps only a share of the events (the "
        "*budget*) and skips the rest, to save time. Pick a document and a budget, press Run, and the other "
        "pages show what was kept, what it cost and what it saved."
    ),
    "events": (
        "In a layer's chart each cell is one event: a head pair (row) and a chunk of 64 tokens (column); the "
        "overview of all layers shows, per chunk, the share of a layer's head pairs that kept it. "
        "Dark cells were kept: "
        "that chunk was written into that head pair's long-range memory. Light cells were skipped: every "
        "token still got its output, but the chunk's writes never reached the memory later tokens read. "
        "Click the strip under the chart to read the chunk's text."
    ),
    "budget": (
        "The budget is shared by all head pairs of a layer. With the `score` selector a head pair that "
        "remembers for long (slow decay) or writes strongly receives more events than an even split would "
        "give it; the dashed line is that even split."
    ),
    "error": (
        "Skipping events changes the outputs. Here the sparse run is compared with the full (dense) one: the "
        "relative error of each layer's outputs, where along the document it appears, and at the end of the "
        "model how often both pick the same next token (top-1 agreement) and how much their predictions "
        "differ (KL divergence)."
    ),
    "timings": (
        "How long the prefill took, dense and sparse. Each time is the median of several repeated runs, with "
        "their range: when two ranges overlap, the difference is within the noise of the machine and is not "
        "a difference. The GDN core is only part of the model, so a faster core saves only its share of the "
        "whole prefill."
    ),
    "compare": (
        "Two settings on the same document side by side: for example a smaller budget, or the `uniform` "
        "selector, which gives every head pair the same number of events. Lower error at the same budget "
        "means a better choice of events."
    ),
    "export": (
        "Everything the views show comes from four tables (events, head pairs, layers, chunks) and a summary. "
        "Download them for your own analysis, or copy the link: it reopens this exact view."
    ),
    "results": (
        "These are measurements the project made and committed, on the machine each one names: kernel speed "
        "on a GPU, whole prefills, the selectors' error. They are not live and not from this computer."
    ),
    "tour": (
        "A walk through one prepared example in three steps: what an event is, why the selector kept these "
        "events, and what skipping the others cost."
    ),
}

TOUR_EXAMPLE = "passkey-haystack"
TOUR_NEEDLE = "special magic number"      # the passkey's line (data/samples/index.json: a held-out RULER sample)
# The needle's sentence, the passkey its last group: first the needle in the haystack, last the answer at the end.
PASSKEY = re.compile(r"special magic number for \S+ is:? (\d+)")
TOUR_STEPS = (
    ("What an event is",
     "The document is a long stretch of Milton's poetry with one fact hidden in it: a passkey (\"the special "
     "magic number for ... is ...\"), asked for again at the end. The model reads "
     "it 64 tokens (one *chunk*) at a time. After each chunk, each *head pair* of each layer may commit what "
     "it read to its long-range memory: that commit is an **event**. Below, one layer: rows are head pairs, "
     "columns are chunks, dark cells are the events SparseGDN kept. The dotted line marks the chunk with the "
     "passkey."),
    ("Why these were kept",
     "SparseGDN cannot look ahead, so it guesses which events matter from a cheap *score*: how much the chunk "
     "writes into the memory, times how long later tokens will still read it (the memory fades at a rate "
     "each head pair learned). In each layer the highest-scoring events are kept until the budget is used. "
     "The chart shows the scores of the kept and the skipped events of this layer."),
    ("What skipping cost",
     "Every token still gets an output; only the skipped chunks' writes to memory are lost. The chart shows "
     "how far the sparse outputs drift from the dense ones along the document, and the numbers below say "
     "what that does to the model's next-token predictions."),
)
