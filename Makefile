# The two commands of the README: `make certify` and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV := .venv
BUNDLE ?= evidence/gb200-seed

.PHONY: certify test bootstrap lint typecheck bench bench-loaded bench-suite demo-slurm demo-slurm-stop

bootstrap:
	@scripts/bootstrap

certify: bootstrap
	@$(VENV)/bin/clustercert certify $(BUNDLE)

# Two pytest-xdist workers, one test file at a time per worker (a file's module fixtures are built once; a session
# fixture such as the seed certification once per worker that needs it), in collection order: the end-to-end files,
# each a few whole certifications, go first and the many short unit files fill in at the end.
test:
	@scripts/bootstrap --test
	@$(VENV)/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder

lint: bootstrap
	@$(VENV)/bin/ruff check clustercert flows tests bench

typecheck: bootstrap
	@$(VENV)/bin/mypy

bench: bootstrap
	@for b in bench/bench_*.py; do [ $$b = bench/bench_loaded.py ] || [ $$b = bench/bench_suite.py ] || $(VENV)/bin/python $$b || exit 1; done

# Ten certifications beside four CPU-bound processes (long, and it loads the machine: not part of `make bench`).
bench-loaded: bootstrap
	@$(VENV)/bin/python bench/bench_loaded.py

# `make test`'s pytest command timed, wall and CPU, into bench/results/suite.json (as long as the suite: not part of
# `make bench`).
bench-suite: bootstrap
	@$(VENV)/bin/python bench/bench_suite.py

# A real (CPU) certification run on a local Slurm cluster: scripts/slurm-local starts munged, MariaDB, slurmdbd,
# slurmctld and three slurmd on loopback (installing Debian's packages as root once), then `clustercert run` runs
# the sample plan with a node set DOWN mid-run and certifies the bundle. Each demo starts from a fresh bundle.
# The outcome (CERTIFIED or not) is the report's; the target fails only when no report could be written.
DEMO_BUNDLE ?= $(or $(CLUSTERCERT_REPORTS_DIR),reports)/slurm-demo-bundle
demo-slurm: bootstrap
	@scripts/slurm-local start
	@rm -rf $(DEMO_BUNDLE)
	@eval "$$(scripts/slurm-local env)"; $(VENV)/bin/clustercert run clustercert/runner/plans/loopback.yaml \
		--bundle $(DEMO_BUNDLE) --certify; rc=$$?; [ $$rc -le 3 ] || exit $$rc

demo-slurm-stop:
	@scripts/slurm-local stop
