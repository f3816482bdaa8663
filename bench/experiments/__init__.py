"""experiments: many jobs with a purpose; imports jobs and below, and analysis.

suites and pool (config + resources -> the points of a sweep; pure), sweep
(the resumable engine), validation, node_checks, cluster_checks and validate
(bench validate: its state, its checks, their order and record).
"""
