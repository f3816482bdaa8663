"""jobs: one training run or one comm measurement, planned, launched and recorded; imports launch and below, and analysis.

plan (where a job runs: resources, launcher, device, from a typed
HostSelection), gate (preflight, inventory, the verdict before launch),
train (a training job and its record), comm (a collective-bandwidth job,
CommConfig).
"""
