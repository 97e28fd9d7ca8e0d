# The two commands of the README: `make certify` and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV := .venv
BUNDLE ?= evidence/gb200-seed

.PHONY: certify test bootstrap lint typecheck bench bench-loaded

bootstrap:
	@scripts/bootstrap

certify: bootstrap
	@$(VENV)/bin/clustercert certify $(BUNDLE)

test: bootstrap
	@$(VENV)/bin/python -m pytest -p no:cacheprovider

lint: bootstrap
	@$(VENV)/bin/ruff check clustercert flows tests bench

typecheck: bootstrap
	@$(VENV)/bin/mypy

bench: bootstrap
	@for b in bench/bench_*.py; do [ $$b = bench/bench_loaded.py ] || $(VENV)/bin/python $$b || exit 1; done

# Ten certifications beside four CPU-bound processes (long, and it loads the machine: not part of `make bench`).
bench-loaded: bootstrap
	@$(VENV)/bin/python bench/bench_loaded.py
