"""vitbench: DeepSpeed ViT training benchmark for clusters.

Nothing here imports torch: `bench --help`, `bench hosts` and the preflight
must answer at once. Only `bench.worker` (the rank entrypoint) does.
"""

__version__ = "0.1.0"
