"""render: what a person reads: rich tables, progress, plots, JUnit; imports analysis and core only.

Drawn from the same records the JSON prints, so print and JSON cannot
drift. Only bench.commands imports this folder.
"""
