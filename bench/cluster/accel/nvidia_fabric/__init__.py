"""NVLink domains across nodes (GB200/GB300 NVL72 racks): which nodes' GPUs share a ClusterUUID and clique.

Not a backend (bench.cluster.accel.REGISTRY does not name it): the NVIDIA fabric's view of several nodes at
once, from each node's health report's "fabric" (bench.cluster.health.fabric_state). See domains.
"""
