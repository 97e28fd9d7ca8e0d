"""Running the test phases on a cluster: certification plans, the Slurm backend, fault injection, CPU workloads."""
