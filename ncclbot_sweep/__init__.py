"""ncclbot-sweep: forced-arm NCCL sweeps, ingest, NCCL-BOT analysis and the tuner plugin."""

__version__ = "0.1.0"
__all__ = ["__version__"]
