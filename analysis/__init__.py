"""NCCL-BOT analysis of forced-arm datasets (importable as ``ncclbot_sweep.analysis``)."""
