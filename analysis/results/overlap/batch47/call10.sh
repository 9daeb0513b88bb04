#!/usr/bin/env bash
# Batch 48's first call (issue 14): with the key list (the one launch), pass 3 stores k_commit = s k before the solve and
# w and u unscaled, as main's pass 3 does; the lists' route keeps k in place, the scale in w and u. Batch 47's call 8
# (H100): a list of k as loaded cost pass 3 +15% at 128K (0.701 against main's 0.610 ms) and the one launch +2.1-2.4% at
# 16K-128K; the lists' route gained 1.6-2.1% from 32K. Compiled for sm_90 (compile_report --tokens 32768), pass 3 then
# spilled (62 local-memory instructions); now 14, as main's.
# Forms, three alternating rounds: base (main's sources, base.tar) and list (this build), both routes; then each
# profiled once at 128K on the one launch (benchmarks/profile_call.py, SPARSEGDN_LISTS_FROM=0).
# Prediction (written before the run): pass 3 within 2% of main's at 128K; the one launch within 1% of main's at
# 16K-128K; the lists' route as batch 47's call 8 (-1.6 to -2.1% from 32K).
# Run from the project root, after `git archive 2cc2d33 sparsegdn benchmarks > analysis/results/overlap/batch45/base.tar`:
# OUT=$OUT bash analysis/results/overlap/batch45/call10.sh (~3.5 min on an H100).
# The same rounds and profiles as call 8 (batch 47), which it runs.
exec bash analysis/results/overlap/batch45/call8.sh
