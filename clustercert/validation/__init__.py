"""Evidence validation: the expectation suites of checks/ run with Great Expectations, and their tables."""
