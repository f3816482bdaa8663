"""Open MPI's mpirun as bench runs it across hosts: the options that work, for the ranks and for the probe.

    mpirun_args({"GLOO_SOCKET_IFNAME": "ib0"})
    # ['--bind-to', 'none', '--oversubscribe', '--mca', 'btl_tcp_if_include', 'ib0']
"""

from __future__ import annotations


def mpirun_args(environ: dict[str, str]) -> list[str]:
    # Without --bind-to none OpenMPI pins every rank of a node to core 0.
    args = ["--bind-to", "none", "--oversubscribe"]
    iface = environ.get("NCCL_SOCKET_IFNAME") or environ.get("GLOO_SOCKET_IFNAME")
    if iface:
        # DeepSpeed's runner otherwise adds `btl_tcp_if_include eth0`, which
        # kills any MPI traffic on nodes without an eth0. Not oob_tcp_if_include:
        # mpirun itself applies it on the launching node, which (a login node,
        # or here the root namespace) may lack the ranks' interface; orted finds
        # a working address by itself.
        args += ["--mca", "btl_tcp_if_include", iface]
    return args
