"""cluster: the nodes as they are, before anything trains; imports core only.

hostfile and hostnames (DeepSpeed's hostfile, filters, HostSelection; every
host name validated before ssh sees it), remote (an argv on many hosts over
ssh), preflight (same software everywhere), probe, inventory,
probe_launch, probe_mpi (each node's GPUs, by ssh, mpirun or srun), hetero
(the heterogeneity verdict), container (the image prefix on other nodes),
mpirun and slurm (Open MPI's options; an allocation read as a hostfile),
interconnect and linkkind (what links a node's GPUs and the nodes, as a kind),
health/ (a node's own health counters and kernel log as findings), findings
(their table of meanings), accel/ (one backend per accelerator vendor: every
reader of a vendor's tools; bench.cluster.accel.base the interface).
"""
