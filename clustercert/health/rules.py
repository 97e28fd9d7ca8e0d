"""The node-health rules (references/health-rules.yaml) as typed data: every verdict the judges give comes from
here, each with the source it names."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.errors import CatalogError
from clustercert.yamlio import load_yaml_model

__all__ = ["RULES_FILE", "HealthRules", "XidRule", "load_health_rules"]

# the rules' file name, in references/ and in a run folder (the copy the run judged with, which `rerun` reads)
RULES_FILE = "health-rules.yaml"

_HINT = "Fix the health rules (see references/README.md, \"Node-health rules\")."
StatusName = Literal["PASS", "WARN", "FAIL", "SKIPPED", "ERROR"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    title: str
    url: str | None = None
    note: str | None = None


class Rule(_Strict):
    status: StatusName
    source: str
    note: str | None = None


class ReplayRule(Rule):
    ratio: float = Field(gt=1)
    min_excess: int = Field(ge=0)


class DcgmRules(_Strict):
    source: str
    results: dict[str, StatusName]

    @model_validator(mode="after")
    def _never_skip_as_pass(self) -> DcgmRules:
        for result in ("Skip", "Not Run", "Error"):
            if self.results.get(result) == "PASS":
                raise ValueError(f"a DCGM result of {result} is never a pass")
        return self


class GpuRules(_Strict):
    volatile_uncorrectable: Rule
    aggregate_uncorrectable: Rule
    remap_pending: Rule
    remap_failure: Rule
    sram_threshold_exceeded: Rule
    retired_pages_pending: Rule
    reset_required: Rule
    drain_and_reset_recommended: Rule
    hw_slowdown_idle: Rule
    hw_slowdown_busy: Rule
    pcie_replays: ReplayRule
    pcie_replay_rollovers: Rule


class FabricRules(_Strict):
    source: str
    state_ok: list[str]
    status_ok: list[str]
    health_ok: list[str]
    bandwidth_ok: list[str]
    nvlink_domain_products: list[str]
    nvlink_domain_source: str


class NvlinkRules(_Strict):
    source: str
    expected_links: dict[str, int]
    down: StatusName
    slower_than_peers: StatusName


class TopologyRules(_Strict):
    source: str
    note: str | None = None
    weaker_pair: StatusName


class InfinibandRules(_Strict):
    source: str
    port_down: StatusName
    slower_than_peers: StatusName
    tool_failed: StatusName


class FlapRules(_Strict):
    source: str
    interface_prefixes: list[str]
    warn_at: int = Field(ge=1)
    fail_at: int = Field(ge=1)
    note: str | None = None


class PrescreenRules(_Strict):
    source: str
    step_failed: StatusName
    step_unreadable: StatusName
    step_missing: StatusName

    @model_validator(mode="after")
    def _never_missing_as_pass(self) -> PrescreenRules:
        if "PASS" in (self.step_failed, self.step_unreadable, self.step_missing):
            raise ValueError("a prescreen step that failed, could not be read or is missing is never a pass")
        return self


class FabricManagerRules(_Strict):
    source: str
    fatal_sxid: StatusName
    non_fatal_sxid: StatusName
    fatal_entry: StatusName
    error_entry: StatusName
    warning_entry: StatusName


class XidRule(_Strict):
    """One Xid of the catalog: its mnemonic, description and the verdict on the GPU that logged it."""

    code: int
    mnemonic: str
    description: str
    action: str
    status: StatusName


class XidRules(_Strict):
    source: str
    actions: dict[str, StatusName]
    recovery_none: list[str]
    unknown: StatusName
    codes: dict[int, tuple[str, str, str]]
    unbucketed: dict[int, tuple[str, str, StatusName]]

    @model_validator(mode="after")
    def _actions_known(self) -> XidRules:
        unknown = sorted({action for _, _, action in self.codes.values()} - set(self.actions))
        if unknown:
            raise ValueError(f"xid.codes name actions xid.actions does not give a verdict for: {', '.join(unknown)}")
        both = sorted(set(self.codes) & set(self.unbucketed))
        if both:
            raise ValueError(f"Xid {both[0]} is in both xid.codes and xid.unbucketed")
        return self


class HealthRules(_Strict):
    """The whole rules file; `sources` names every source the rules cite."""

    schema_version: Literal[1]
    id: str
    version: str
    title: str
    sources: dict[str, Source]
    dcgm: DcgmRules
    gpu: GpuRules
    fabric: FabricRules
    nvlink: NvlinkRules
    topology: TopologyRules
    infiniband: InfinibandRules
    link_flaps: FlapRules
    prescreen: PrescreenRules
    fabric_manager: FabricManagerRules
    xid: XidRules

    @model_validator(mode="after")
    def _sources_named(self) -> HealthRules:
        cited = {self.dcgm.source, self.fabric.source, self.fabric.nvlink_domain_source, self.nvlink.source,
                 self.topology.source, self.infiniband.source, self.link_flaps.source, self.prescreen.source,
                 self.fabric_manager.source, self.xid.source}
        cited |= {rule.source for rule in (getattr(self.gpu, name) for name in GpuRules.model_fields)}
        missing = sorted(cited - set(self.sources))
        if missing:
            raise ValueError(f"rules cite sources not listed under `sources`: {', '.join(missing)}")
        return self

    def xid_rule(self, code: int) -> XidRule | None:
        """The catalog's entry for an Xid, None when the catalog does not list it."""
        if code in self.xid.codes:
            mnemonic, description, action = self.xid.codes[code]
            return XidRule(code=code, mnemonic=mnemonic, description=description, action=action,
                           status=self.xid.actions[action])
        if code in self.xid.unbucketed:
            mnemonic, description, status = self.xid.unbucketed[code]
            return XidRule(code=code, mnemonic=mnemonic, description=description, action="(no bucket)",
                           status=status)
        return None


def load_health_rules(path: Path) -> HealthRules:
    """The rules file at `path`; any problem is a CatalogError naming the file, line and key."""
    return load_yaml_model(path, HealthRules, CatalogError, hint=_HINT)

