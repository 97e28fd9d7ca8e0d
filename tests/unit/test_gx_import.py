"""Great Expectations imported with scipy.stats deferred (`clustercert.validation.suites.import_great_expectations`):
not loaded by the import, loaded in full by its first use, and left alone where it is loaded already; and without
SQLAlchemy, which it then does not load, and which validates the sample's tables to the same report as with it.
Each case in a fresh interpreter, as a certification imports it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT

_PROBE = """
import json, sys
if sys.argv[1] == "stats-first":
    import scipy.stats
from clustercert.validation.suites import import_great_expectations
gx = import_great_expectations()
from great_expectations.expectations.core import expect_column_kl_divergence_to_be_less_than as kl
out = {"gx": gx.__name__, "kind_after_import": type(sys.modules["scipy.stats"]).__name__,
       "loaded_after_import": "scipy.stats._stats_py" in sys.modules,
       "same_module": kl.stats is sys.modules["scipy.stats"]}
if sys.argv[1] == "use":
    out["entropy"] = kl.stats.entropy([0.5, 0.5], [0.9, 0.1])
    out["kind_after_use"] = type(sys.modules["scipy.stats"]).__name__
    out["loaded_after_use"] = "scipy.stats._stats_py" in sys.modules
print(json.dumps(out))
"""


def _probe(case: str, probe: str = _PROBE) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", probe, case], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def test_the_import_leaves_scipy_stats_unloaded_and_its_first_use_loads_it_in_full() -> None:
    found = _probe("use")
    assert found["gx"] == "great_expectations"
    assert found["kind_after_import"] == "_LazyModule"
    assert found["loaded_after_import"] is False
    assert found["same_module"] is True  # Great Expectations holds the deferred module itself
    # KL divergence of (0.5, 0.5) from (0.9, 0.1), by hand: 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.51083
    assert math.isclose(found["entropy"], 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel_tol=1e-12)
    assert found["kind_after_use"] == "module"
    assert found["loaded_after_use"] is True


def test_a_scipy_stats_loaded_before_is_left_as_it_is() -> None:
    found = _probe("stats-first")
    assert found["kind_after_import"] == "module"
    assert found["loaded_after_import"] is True
    assert found["same_module"] is True


_SQL_PROBE = """
import json, sys
if sys.argv[1] == "sqlalchemy-first":
    import sqlalchemy
from clustercert.validation.suites import import_great_expectations, validate_bundle
gx = import_great_expectations()
from great_expectations.compatibility import sqlalchemy as gx_sql
out = {"loaded_by_import": "sqlalchemy" in sys.modules, "gx_has_it": gx_sql.sqlalchemy is sys.modules.get("sqlalchemy")}
from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.evidence.facts import bundle_facts
from clustercert.evidence.parse import parse_bundle
from clustercert.settings import load_settings
settings = load_settings()
bundle = load_bundle(settings.references_dir.parent / "evidence" / "gb200-seed")
catalog = load_catalog(bundle.spec.catalog, settings.references_dir)
report = validate_bundle(bundle, bundle_facts(bundle, catalog), parse_bundle(bundle), checks_dir=settings.checks_dir)
out["report"] = report.to_json()
import sqlalchemy  # importable after the import as before
out["importable_after"] = sqlalchemy.__name__
print(json.dumps(out, sort_keys=True, default=str))
"""


def test_sqlalchemy_is_not_loaded_and_the_sample_validates_the_same_as_with_it() -> None:
    hidden = _probe("hidden", _SQL_PROBE)
    loaded = _probe("sqlalchemy-first", _SQL_PROBE)
    assert hidden["loaded_by_import"] is False and hidden["gx_has_it"] is False
    assert loaded["loaded_by_import"] is True and loaded["gx_has_it"] is True  # loaded before: used as it is
    assert hidden["importable_after"] == loaded["importable_after"] == "sqlalchemy"
    report = hidden["report"]
    results = [r for table in report["tables"] for r in table["results"]]
    assert len(report["tables"]) >= 10 and len(results) >= 100  # the sample's tables, every suite run on them
    assert {r["status"] for r in results} == {"PASS"}  # the sample's evidence passes every expectation it is given
    assert report == loaded["report"]
