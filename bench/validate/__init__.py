"""validate: bench validate's checks, one module per check; imports jobs and below, and analysis.

bench.validate.stages holds the one list that orders them and writes the
record; bench/README.md names every module.
"""
