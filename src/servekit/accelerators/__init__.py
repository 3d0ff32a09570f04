"""The machine's GPUs: which there are (NVML or ``nvidia-smi``), how busy they are, which instance holds which."""
