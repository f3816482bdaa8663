"""experiments: many jobs with a purpose; imports jobs and below, and analysis.

suites and pool (config + resources -> the points of a sweep; pure), sweep
(the resumable engine), memory, and tune. bench validate has its own
folder, bench/validate, beside this one.
"""
