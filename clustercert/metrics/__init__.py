"""Pure metric functions: tables and catalog values in, numbers out; no I/O, no clock."""
