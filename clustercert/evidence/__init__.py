"""The evidence bundle: bundle.yaml, safe file resolution, hashing, provenance, parsing every file."""
