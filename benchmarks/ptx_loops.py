"""Reading loops out of a compiled kernel's PTX, with no side effect on import (benchmarks/compile_report.py, which
compiles for sm_90, clears TRITON_INTERPRET when imported; tests import this instead).

    python benchmarks/ptx_loops.py KERNEL.ptx      # the loops that release something, as a dict per loop header
"""
import re
import sys
from pathlib import Path


def release_loops(ptx: str) -> dict:
    """Each PTX loop (LLVM's comments at a block's start, which may run over the lines after it: `=>This Loop Header`
    or `=>  This Inner Loop Header` on a header's block, `in Loop: Header=BB..` or `Parent Loop BB..` on the others)
    that releases something at GPU scope (`atom...release`), by header: whether it holds no other loop (`Inner`),
    whether the header's block passes a bar.sync before its first branch or atomic (so every path round the loop to the
    release passes one), whether the loop copies asynchronously (`cp.async`: Triton's pipeliner ran) and stores to
    global memory. The chains' counts released inside
    their loop (state_pass.PUBLISH_IN_LOOP) rely on the first."""
    blocks, current = [], None          # [label, annotation, instructions]
    for line in ptx.splitlines():
        text = line.strip()
        start = re.match(r"^(\$L__(BB\d+_\d+):|// %bb\.\d+:)(.*)", text)
        if start:
            current = [start.group(2), start.group(3), []]
            blocks.append(current)
        elif current is not None and text.startswith("//") and not current[2]:
            current[1] += " " + text
        elif current is not None and text and not text.startswith("//"):
            current[2].append(text)
    loops = {}
    for label, annotation, instructions in blocks:
        header = re.search(r"This (Inner )?Loop Header", annotation) and label
        member = re.search(r"in Loop: Header=(BB\d+_\d+)", annotation)
        loop = header or (member.group(1) if member else None)
        if loop is None:
            continue
        facts = loops.setdefault(loop, {"innermost": False, "barrier_in_header": False, "releases": False,
                                        "async_copies": False, "global_stores": False})
        if header:
            facts["innermost"] = "Inner Loop Header" in annotation
            for text in instructions:
                if re.search(r"\bbra(\.uni)?\b", text) or text.lstrip("@%!p0123456789 ").startswith("atom"):
                    break
                if text.startswith("bar.sync"):
                    facts["barrier_in_header"] = True
                    break
        for text in instructions:
            facts["releases"] |= bool(re.search(r"atom\.\S*release", text))
            facts["async_copies"] |= text.startswith(("cp.async.cg", "cp.async.ca"))
            facts["global_stores"] |= bool(re.search(r"\bst\.global", text))
    return {loop: facts for loop, facts in loops.items() if facts["releases"]}


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(name, release_loops(Path(name).read_text()))
