"""End-to-end tests share the session's seed certification (tests/conftest.py `seed_certified`)."""
