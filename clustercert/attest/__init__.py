"""Attestation and signing: the run manifest, its DSSE envelope, the PDF signature, software versions."""
