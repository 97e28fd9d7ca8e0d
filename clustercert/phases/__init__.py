"""Per-phase judging: parsed tables + catalog -> measurements and checks (pure; flows call these)."""
