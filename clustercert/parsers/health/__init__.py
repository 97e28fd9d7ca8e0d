"""Node-health evidence: one module per tool output format, each turning a file into a table that keeps
file and line."""
