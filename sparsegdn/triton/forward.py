"""SparseGDN forward on the GPU: five passes, see each kernel's file.

    1 block_solve    (parallel, all chunks)   band 0/1 Tinv on 16x16 blocks, score statistics
      chunk_prepare  (parallel, all chunks)   the same for bands 2/3, on whole 64x64 tiles
    2 score_scan     (parallel, head pairs)   event scores
      schedule       (torch top-k + a kernel)  selection, event lists, snapshot indices, decays
    3 event_prepare  (parallel, events)       w, u, k_commit of the selected chunks only
    4 state_pass     (sequential, events)     commits and snapshots
    5 chunk_output   (parallel, all chunks)   every token's output

Memory beyond the output: Tinv (8 KB per chunk and head pair, half the size of v at V = 128) and,
proportional to the budget, the w / u / k_commit lists and one snapshot per commit.
"""
import torch

from .chunk_output import chunk_output
from .block_solve import block_solve
from .chunk_prepare import chunk_prepare
from .event_prepare import event_prepare
from .schedule import build_schedule, select_events
from .score_scan import score_scan
from .state_pass import state_pass

DOT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def sparse_gdn_forward(q, k, v, g, beta, *, events, budget, selector, band, scale, initial_state,
                       output_final_state, use_qk_l2norm_in_kernel, stage_hook=None):
    """See sparsegdn.triton. stage_hook(name), when given, is called after each pass (for timing)."""
    dtype = v.dtype if v.dtype in DOT_DTYPES else torch.float32
    q, k, v, beta = (x.to(dtype).contiguous() for x in (q, k, v, beta))
    g = g.float().contiguous()
    if initial_state is not None:
        initial_state = initial_state.float().contiguous()
    value_heads = v.shape[2]
    hook = stage_hook or (lambda name: None)

    prepare = block_solve if band <= 1 else chunk_prepare
    t_inv, chunk_log_decay, write, read = prepare(k, v, g, beta, band=band, normalize=use_qk_l2norm_in_kernel,
                                                  num_value_heads=value_heads)
    hook("chunk_prepare")
    scores = score_scan(chunk_log_decay, write, read)
    if events is None:
        events, count = select_events(scores, budget=budget, selector=selector)
        schedule = build_schedule(events, chunk_log_decay, max_events=count)
    else:
        schedule = build_schedule(events.to(torch.bool), chunk_log_decay)
    hook("selection")
    w, u, k_commit = event_prepare(k, v, g, beta, t_inv, schedule.event_chunks, normalize=use_qk_l2norm_in_kernel,
                                   num_value_heads=value_heads)
    hook("event_prepare")
    snapshots, final_state = state_pass(w, u, k_commit, schedule, chunk_log_decay, initial_state,
                                        store_final=output_final_state)
    del w, u, k_commit     # freed before the output is allocated: not needed past the recurrence
    hook("state_pass")
    o = chunk_output(q, k, v, g, beta, t_inv, snapshots, schedule, scale=scale, normalize=use_qk_l2norm_in_kernel,
                     out_dtype=v.dtype)
    hook("chunk_output")
    return o, final_state, schedule.events, scores, schedule.per_head
