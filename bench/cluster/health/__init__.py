"""health: a node's own health counters and kernel log as findings with meanings; imports core and cluster only.

    from bench.cluster.health import collect_live, from_dir, worst, gpu_index_for_bus
    report = collect_live(since=None, folders=["results", "/tmp"], dcgm_level=None)
    worst(report)                                   # "fail", "warn", "info" or "ok"
    from_dir("saved/node7")                         # the same report from saved outputs

One small module per source, as gpud does: kernel_log (Xid, SXid, fallen off
the bus, RmInitAdapter, AER), infiniband, host (free disk); the GPUs' own
sources are their vendor's backend's (bench.cluster.accel: health_live,
health_saved), which live and saved ask. bench.cluster.findings holds the
table of meanings (bench/data/health_actions.json) and the shared helpers;
report the report's shape (every key documented there); live and saved
build it from this node or from a folder. No module imports torch.
"""

from bench.cluster.findings import bus_key, gpu_index_for_bus, worst
from bench.cluster.health.live import collect_live
from bench.cluster.health.saved import from_dir

__all__ = ["bus_key", "collect_live", "from_dir", "gpu_index_for_bus", "worst"]
