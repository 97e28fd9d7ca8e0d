"""Synthetic clusters and workloads -> evidence bundles written in the formats real tools write."""
