"""launch: (resources, launcher) -> an argv, and running it to a known end; imports cluster and core.

base (LaunchPlan, Job, the Launcher class), one class per launcher (local,
pdsh, openmpi, slurm: the only place a launcher's name matters), registry,
plan (build the LaunchPlan and its files), environment (what ranks get),
execute (own session, watchdog), diagnose (which rank, why), cleanup (stop
ranks by recorded PID, never by name), memcg (the OOM killer's count).
"""
