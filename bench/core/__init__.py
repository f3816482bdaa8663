"""core: what every layer shares, the ranks included; imports nothing else of bench, and no torch.

config (RunConfig, LaunchConfig) and options (the CLI generated from them),
precision, models (presets), datasets and synthetic (CIFAR format, numpy
only), dsconfig (the DeepSpeed JSON), collectives (the table of ops), sizes,
results (records, the schema, atomic appends, validated reads), provenance,
flops (analytic ViT FLOPs), gpus (the GPU table), errors (exit statuses),
containerspec (--container-exec as text).
"""
