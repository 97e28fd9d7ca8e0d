"""Certification profiles: which checks decide under full, network acceptance and node health, and what a bundle
that holds only part of the evidence is told (not submitted, never "the cluster did not show it")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from clustercert.catalog import Catalog, Profile
from clustercert.errors import UsageError
from clustercert.phases.efficiency import judge_efficiency
from clustercert.phases.profile import apply_profile, choose_profile, decides, profile_outcome, profile_section
from clustercert.phases.resilience import judge_resilience
from clustercert.phases.scaling import judge_scaling
from clustercert.verdicts import Check, Outcome, Severity, Status, decide_outcome
from tests.unit.phase_bundles import gb200, nccl_output, parse_all, write_bundle

GIB = 1 << 30


def _pair_sweep(tmp_path: Path, values: list[float]) -> Any:
    """A bundle holding only node-pair all_reduce runs, as a network acceptance sweep is submitted."""
    nodes = [["n1", "n3"], ["n2", "n4"], ["n1", "n5"]]
    runs, files = [], {}
    for i, (pair, v) in enumerate(zip(nodes, values, strict=True)):
        rel = f"nccl/pair-{i}.log"
        runs.append({"id": f"pair-{i}", "phase": "scaling", "kind": "collective", "format": "nccl-tests",
                     "scope": "pair", "gpus": 2, "nodes": pair, "files": [rel]})
        files[rel] = nccl_output("all_reduce", 2, {GIB: v, 2 * GIB: v}, hosts=pair)
    return write_bundle(tmp_path / "b", runs, files)


def _judged(bundle: Any) -> list[Check]:
    catalog = gb200()
    parsed = parse_all(bundle)
    logs = {k: v for k, v in parsed.items() if not k.startswith("pair")}
    return [*judge_efficiency(bundle.spec, catalog, logs).checks,  # type: ignore[arg-type]
            *judge_scaling(bundle, catalog, parsed).checks, *judge_resilience(bundle, catalog, parsed).checks]


def test_the_default_profiles_are_full_network_and_health() -> None:
    profiles = gb200().spec.profiles
    assert list(profiles) == ["full", "network", "health"]
    assert profiles["full"].phases == ["efficiency", "scaling", "resilience", "health"]
    assert profiles["full"].when_present == ["health"] and profiles["full"].missing == "fail"
    assert profiles["network"].phases == ["scaling"] and profiles["network"].missing == "not-submitted"
    assert profiles["health"].phases == ["health"]
    assert "not a full certification" in profiles["network"].not_covered


def test_a_catalog_without_a_full_profile_is_refused() -> None:
    spec = gb200().spec.model_dump(mode="json")
    spec["profiles"] = {"network": {"title": "n", "phases": ["scaling"]}}
    with pytest.raises(ValidationError, match="profiles must define 'full'"):
        Catalog.model_validate(spec)
    spec["profiles"] = {"full": {"title": "f", "phases": ["efficency"]}}
    with pytest.raises(ValidationError, match="efficency"):
        Catalog.model_validate(spec)


def test_network_profile_decides_on_collectives_and_pairs_only() -> None:
    network = gb200().spec.profiles["network"]

    def check(check_id: str, phase: str = "scaling") -> Check:
        return Check(check_id, "t", phase, Severity.REQUIRED, Status.PASS, None, None, "", "m")

    assert decides(network, check("scaling.pairs_no_degraded_link"))
    assert decides(network, check("scaling.pair-all_reduce_busbw_meets_target"))
    assert decides(network, check("scaling.pair-3_valid"))
    assert not decides(network, check("scaling.llama3-70b-fp8_weak_scaling_efficiency"))
    assert not decides(network, check("efficiency.grok1-bf16-512_meets_baseline", "efficiency"))
    assert decides(network, check("validation.x", "validation"))


def test_a_pair_sweep_under_full_fails_for_what_was_not_submitted(tmp_path: Path) -> None:
    checks = apply_profile(_judged(_pair_sweep(tmp_path, [45.0, 46.0, 44.0])), "full",
                           gb200().spec.profiles["full"])
    failed = [c for c in checks if c.status is Status.FAIL and c.severity is Severity.REQUIRED]
    # the suite's four workloads, weak scaling, the missing scopes, the long run: the cluster did not show them
    assert failed and all(c.absent for c in failed)
    assert decide_outcome(checks) is Outcome.NOT_CERTIFIED


def test_a_healthy_pair_sweep_under_network_is_accepted_and_the_rest_is_not_submitted(tmp_path: Path) -> None:
    bundle = _pair_sweep(tmp_path, [45.0, 46.0, 44.0])
    catalog = gb200()
    checks = apply_profile(_judged(bundle), "network", catalog.spec.profiles["network"])
    assert not [c for c in checks if c.status in (Status.FAIL, Status.ERROR)]
    required = [c for c in checks if c.severity is Severity.REQUIRED]
    assert {c.id for c in required} == {"scaling.pair-all_reduce_busbw_meets_target",
                                        "scaling.pairs_no_degraded_link", "scaling.pairs_no_suspect_node"}
    assert decide_outcome(checks) is Outcome.CERTIFIED
    skipped = [c for c in checks if c.absent]
    assert skipped and all(c.status is Status.SKIPPED and c.message.startswith("not submitted") for c in skipped)
    assert not any("the cluster did not show" in c.message for c in checks)
    section = profile_section("network", catalog, bundle, checks)
    assert [n["phase"] for n in section["not_submitted"]] == ["efficiency", "scaling", "resilience", "health"]
    # the scopes the sweep did not run are counted on the scaling line, never failed
    assert section["not_submitted"][1]["checks"] == sum(1 for c in skipped if c.phase == "scaling") > 0
    efficiency = section["not_submitted"][0]
    assert efficiency["line"] == "efficiency: not submitted (4 checks without evidence); outside the network " \
                                 "profile, not judged"
    assert section["title"] == "Network acceptance" and "not a full certification" in section["not_covered"]


def test_a_degraded_pair_fails_the_network_acceptance(tmp_path: Path) -> None:
    checks = apply_profile(_judged(_pair_sweep(tmp_path, [45.0, 46.0, 20.0])), "network",
                           gb200().spec.profiles["network"])
    failed = {c.id for c in checks if c.status is Status.FAIL and c.severity is Severity.REQUIRED}
    assert "scaling.pairs_no_degraded_link" in failed
    assert decide_outcome(checks) is Outcome.NOT_CERTIFIED


def test_the_health_profile_without_health_evidence_is_incomplete_and_says_so(tmp_path: Path) -> None:
    bundle = _pair_sweep(tmp_path, [45.0, 46.0, 44.0])
    catalog = gb200()
    checks = apply_profile(_judged(bundle), "health", catalog.spec.profiles["health"])
    assert not [c for c in checks if c.severity is Severity.REQUIRED and c.phase != "validation"]
    profile = catalog.spec.profiles["health"]
    assert profile_outcome(checks, profile) is Outcome.INCOMPLETE
    # a passing evidence validation alone certifies nothing under a profile whose phases were not submitted
    valid = Check("validation.x", "t", "validation", Severity.REQUIRED, Status.PASS, None, None, "", "m")
    assert decide_outcome([*checks, valid]) is Outcome.CERTIFIED
    assert profile_outcome([*checks, valid], profile) is Outcome.INCOMPLETE
    lines = [n["line"] for n in profile_section("health", catalog, bundle, checks)["not_submitted"]]
    assert "health: not submitted; the health profile decides on it" in lines


def test_the_profile_is_the_one_asked_for_else_the_bundles_else_full(tmp_path: Path) -> None:
    bundle = _pair_sweep(tmp_path, [45.0, 46.0, 44.0])
    catalog = gb200()
    assert choose_profile(None, bundle, catalog) == "full"
    assert choose_profile("network", bundle, catalog) == "network"
    declared = bundle.spec.model_copy(update={"profile": "health"})
    assert choose_profile(None, type(bundle)(bundle.root, declared), catalog) == "health"
    with pytest.raises(UsageError, match=r"--profile: expected one of the profiles of catalog exemplar-gb200 "
                                         r"\(full, network, health\), got 'smoke'"):
        choose_profile("smoke", bundle, catalog)


def test_a_catalogs_own_profile_replaces_the_defaults() -> None:
    spec = gb200().spec.model_dump(mode="json")
    spec["profiles"] = {"full": {"title": "Resilience only", "phases": ["resilience"]}}
    catalog = Catalog.model_validate(spec)
    assert list(catalog.profiles) == ["full"] and catalog.judges("resilience") and not catalog.judges("scaling")
    assert isinstance(catalog.profiles["full"], Profile)


def test_the_terminal_names_the_profile_first_and_each_finding_at_its_own_file() -> None:
    """The summary opens with the profile and what it does not cover, and a reason whose finding is its own cites
    the file of the run it is about, not the check's first evidence span (a sweep's first, healthy log)."""
    from clustercert.cli.summary import summary_lines

    check = {"id": "scaling.pair-alltoall_busbw_meets_target", "phase": "scaling", "severity": "required",
             "status": "ERROR"}
    results = {
        "outcome": "INCOMPLETE", "cluster": {"name": "c"}, "checks": [check],
        "profile": {"id": "network", "title": "Network acceptance", "not_covered": "resilience",
                    "not_submitted": [{"line": "resilience: not submitted; outside the network profile, not judged"}]},
        "reasons": [{"check": check["id"], "status": "ERROR", "severity": "required", "phase": "scaling",
                     "summary": "unusable evidence: b.log line 20", "where": ["a.log:1-31"]}],
        "findings": [{"check": check["id"], "count": 1, "where": ["b.log:14"]}],
    }
    lines = summary_lines(results, {}, dev_key=False, redacted=False, width=100)
    assert lines[:3] == ["Profile: Network acceptance (network); not covered: resilience",
                         "Outcome: INCOMPLETE: c", "  why: 1 required check could not be judged (ERROR)"]
    assert lines[3] == "  ERROR scaling: unusable evidence: b.log line 20 [b.log:14]"
    assert lines[-2:] == ["Not submitted (one line per phase)",
                          "  resilience: not submitted; outside the network profile, not judged"]


def test_results_record_the_profile_and_its_own_pass_rule(tmp_path: Path) -> None:
    from clustercert.runs.results import RunMeta, build_results

    bundle = _pair_sweep(tmp_path, [45.0, 46.0, 20.0])
    meta = RunMeta(run_id="r", started_at="2026-12-01T09:00:00Z", bundle_path="b", signer="s", dev_key=True,
                   profile="network")
    results = build_results(meta, bundle, gb200(), _judged(bundle), [], {})
    assert results["outcome"] == "NOT CERTIFIED" and results["profile"]["id"] == "network"
    assert results["pass_rule"] == "every check the network acceptance profile decides (scaling) passes"
    assert RunMeta.from_json(meta.to_json()).profile == "network"
    assert RunMeta.from_json({k: v for k, v in meta.to_json().items() if k != "profile"}).profile == "full"
