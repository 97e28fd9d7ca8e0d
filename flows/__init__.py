"""Prefect flows: the certification as a checklist of tasks around clustercert's domain functions."""
