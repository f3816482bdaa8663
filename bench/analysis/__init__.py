"""analysis: records and summaries -> figures; imports core only (never a launcher, a cluster or render).

metrics and stats (every formula once: docs/metrics.md), figures (a training
run's figures), comm_figures (algbw, busbw rows), report_analysis (groups,
scaling series), stragglers, references (tolerances), link_references (busbw
per interconnect, matmul FLOP/s, scaled to one node), paper (the study).
"""
