"""The command line: argument parsing, printing and exit codes; flows are imported lazily."""
