"""NVLink domains across nodes (GB200/GB300 NVL72 racks): which nodes' GPUs share a ClusterUUID and clique.

Not a backend (bench.cluster.accel.REGISTRY does not name it): the NVIDIA fabric's view of several nodes at
once, from each node's health report's "fabric" (fabric_state). Its modules: fabric_state (each GPU's
fabric state, health bits, ClusterUUID, clique), imex (nvidia-imex-ctl -N), domains (the nodes grouped).
"""
