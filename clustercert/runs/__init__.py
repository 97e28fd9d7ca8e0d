"""The run folder and what reads it back: results.json, run metadata, history, replay and alerts."""
