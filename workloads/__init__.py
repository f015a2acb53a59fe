"""Workload specs of the simulator's workload player, `ncclbot-sweep sim workload` (a data package)."""
