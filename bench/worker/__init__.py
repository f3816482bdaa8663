"""worker: the ranks, the only code that imports torch, deepspeed and timm; imports core only.

bootstrap (one start and end for every rank), dist (the process group and
its timeouts), engines (the timm model, DeepSpeed or DDP), main (a training
rank), loop (the timed step), data (device-resident shards), ddp (the
baseline engine), comm (a comm rank), torch_probe (what torch was built for).
"""
