"""Open MPI's mpirun as bench runs it across hosts: the options that work, for the ranks and for the probe.

    mpirun_args({"GLOO_SOCKET_IFNAME": "ib0"})
    # ['--bind-to', 'none', '--oversubscribe', '--mca', 'btl_tcp_if_include', 'ib0']
    mpirun_args({"NCCL_SOCKET_IFNAME": "=ib0,ib1"})      # ... 'btl_tcp_if_include', 'ib0,ib1'
    mpirun_args({"NCCL_SOCKET_IFNAME": "^lo,docker"})    # BadInput: an exclusion mpirun cannot take here

The interface comes from the user's OMPI_MCA_btl_tcp_if_include, else
NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME. NCCL's syntax is not Open
MPI's: NCCL matches each name as a prefix (`ib` is ib0, ib1, ...), `=`
makes them exact, `^` excludes; btl_tcp_if_include takes exact names (or
subnets) only. So `=a,b` passes as a,b; a name that ends in a digit (ib0,
enp1s0f0) passes as that interface; a bare prefix (`ib`, `eth`) and an
exclusion are refused in one line. An exclusion cannot become
btl_tcp_if_exclude: the mpirun command (bench.launch.openmpi, as DeepSpeed's
OpenMPIRunner 0.19.8 writes it) adds `btl_tcp_if_include eth0` unless these
options name an include, and Open MPI refuses include and exclude together.
"""

from __future__ import annotations

import re

from bench.core.errors import BadInput

_WHOLE_NAME = re.compile(r"^[A-Za-z][\w.:-]*\d$")  # eth0, ib0, enp1s0f0, eth0.100, bond0:1
_WAY_ON = ("give mpirun the interface(s) between the nodes by exact name: GLOO_SOCKET_IFNAME=ib0 (bench passes "
           "it as btl_tcp_if_include) or OMPI_MCA_btl_tcp_if_include=ib0,ib1; NCCL keeps NCCL_SOCKET_IFNAME as it is")


def mpi_interfaces(environ: dict[str, str]) -> str | None:
    """The value for `--mca btl_tcp_if_include`, or None; BadInput for a NCCL value Open MPI cannot take."""
    if environ.get("OMPI_MCA_btl_tcp_if_include"):
        return environ["OMPI_MCA_btl_tcp_if_include"]
    nccl = environ.get("NCCL_SOCKET_IFNAME", "").strip()
    if nccl:
        if nccl.startswith("^"):
            if environ.get("GLOO_SOCKET_IFNAME"):
                return environ["GLOO_SOCKET_IFNAME"]
            raise BadInput(f"NCCL_SOCKET_IFNAME={nccl}: an exclusion, which --launcher openmpi cannot hand to "
                           f"mpirun (its command always sets btl_tcp_if_include, and Open MPI refuses "
                           f"include and exclude together); {_WAY_ON}")
        exact = nccl.startswith("=")
        names = [n.strip() for n in nccl.lstrip("=").split(",") if n.strip()]
        prefixes = [n for n in names if not exact and not _WHOLE_NAME.match(n)]
        if prefixes:
            raise BadInput(f"NCCL_SOCKET_IFNAME={nccl}: {', '.join(repr(p) for p in prefixes)} is a prefix to NCCL "
                           f"(every interface starting so), which Open MPI's btl_tcp_if_include cannot match (exact "
                           f"names only); name the interfaces (NCCL_SOCKET_IFNAME==ib0,ib1), or {_WAY_ON}")
        return ",".join(names)
    return environ.get("GLOO_SOCKET_IFNAME") or None


def mpirun_args(environ: dict[str, str]) -> list[str]:
    # Without --bind-to none OpenMPI pins every rank of a node to core 0.
    args = ["--bind-to", "none", "--oversubscribe"]
    iface = mpi_interfaces(environ)
    if iface:
        # The command otherwise adds `btl_tcp_if_include eth0` (DeepSpeed's default), which
        # kills any MPI traffic on nodes without an eth0. Not oob_tcp_if_include:
        # mpirun itself applies it on the launching node, which (a login node,
        # or here the root namespace) may lack the ranks' interface; orted finds
        # a working address by itself.
        args += ["--mca", "btl_tcp_if_include", iface]
    return args
