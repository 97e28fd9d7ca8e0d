"""Certification plans (YAML, schema_version 1): which jobs to run on the cluster, and the faults to inject.

The schema is documented in docs/plan-schema.md; it is strict (unknown keys are refused) and every
problem is one line naming the file, the line and the field.
"""

from __future__ import annotations

import os
import shutil
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.errors import ClusterCertError, UsageError
from clustercert.evidence.bundle import Cluster  # a plan's cluster is the bundle's it writes
from clustercert.yamlio import load_yaml_model

__all__ = ["FaultKind", "JobKind", "Plan", "PlanError", "PlanJob", "RunnerError", "load_plan", "nccl_tests_binaries",
           "nccl_tests_names"]

_HINT = "Fix the plan (see docs/plan-schema.md)."
_ID = r"^[a-z0-9][a-z0-9._-]*$"
# Plan values that reach a batch script or a command line, each held to its grammar: a newline in one would
# start a command of its own in the script Slurm runs. Slurm partition names, comma-separated (sbatch -p a,b).
_PARTITIONS = r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$"
# A path (an interpreter, nccl-tests' folder): any characters but control ones (newline, NUL, escape).
_PATH = r"^[^\x00-\x1f\x7f]+$"


class PlanError(UsageError):
    """A plan that cannot be used (exit 2)."""


class RunnerError(ClusterCertError):
    """A job that could not be submitted, run to its end or collected (exit 3)."""

    exit_code = 3


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class JobKind(StrEnum):
    COLLECTIVE = "collective"
    TRAINING = "training"  # an efficiency or scaling measurement: the shipped workload, no faults
    RESILIENCE = "resilience"


class FaultKind(StrEnum):
    NODE_DOWN = "node-down"  # scontrol update nodename=X state=down: the job must be requeued elsewhere
    SLOW = "slow"  # the rank's process on the node is stopped and continued (SIGSTOP/SIGCONT): a real straggler
    HANG = "hang"  # the rank's process is stopped for good (SIGSTOP): its peers wait, the watchdog must act


class Fault(_Strict):
    kind: FaultKind = Field(strict=False)  # YAML gives strings; strict elsewhere
    at_step: int = Field(ge=0)
    node: Literal["first", "last"] = "last"  # which node of the job's allocation
    reason: str = "clustercert fault injection"
    slowdown: float = Field(default=0.5, gt=0, lt=1)  # slow: the fraction of time the process is stopped


class Workload(_Strict):
    steps: int = Field(default=200, gt=0)
    batch: int = Field(default=8, gt=0)
    checkpoint_every: int = Field(default=20, gt=0)
    straggler_threshold: float = Field(default=0.75, ge=0, le=1)
    straggler_window: int = Field(default=10, gt=1)
    hang_timeout_s: float = Field(default=60, gt=0)


CollectiveName = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]
_ALL_COLLECTIVES: tuple[CollectiveName, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


class Collectives(_Strict):
    collectives: list[CollectiveName] = Field(default_factory=lambda: list(_ALL_COLLECTIVES), min_length=1)
    min_bytes: int = Field(default=4096, gt=0)
    max_bytes: int = Field(default=1 << 20, gt=0)
    iters: int = Field(default=5, gt=0)
    warmup: int = Field(default=2, ge=0)
    # NVIDIA's nccl-tests binaries (all_reduce_perf, ...): "auto" runs them when every one the job needs is on the
    # PATH of the machine running `clustercert run` (else clustercert's CPU stand-in), "off" always runs the
    # stand-in, a folder runs the binaries in it (missing ones are an error before anything is submitted).
    nccl_tests: str = Field(default="auto", min_length=1, pattern=_PATH)

    @model_validator(mode="after")
    def _binaries_present(self) -> Collectives:
        if self.nccl_tests not in ("auto", "off"):
            folder = Path(self.nccl_tests)
            missing = [name for name in nccl_tests_names(self.collectives)
                       if not os.access(folder / name, os.X_OK) or not (folder / name).is_file()]
            if missing:
                raise ValueError(f"nccl_tests: expected 'auto', 'off' or a folder holding nccl-tests' "
                                 f"{', '.join(nccl_tests_names(self.collectives))}, got '{self.nccl_tests}' "
                                 f"(missing or not executable: {', '.join(missing)})")
        return self


def nccl_tests_names(collectives: list[CollectiveName]) -> list[str]:
    """nccl-tests' binary for each collective: all_reduce -> all_reduce_perf, ..."""
    return [f"{name}_perf" for name in collectives]


def nccl_tests_binaries(collectives: Collectives) -> list[Path] | None:
    """The nccl-tests binaries a collective job runs, in the order of its collectives; None when it runs
    clustercert's stand-in instead ("off", or "auto" without every binary on the PATH)."""
    if collectives.nccl_tests == "off":
        return None
    names = nccl_tests_names(collectives.collectives)
    if collectives.nccl_tests == "auto":
        found = [shutil.which(name) for name in names]
        return None if None in found else [Path(str(p)).resolve() for p in found]
    return [(Path(collectives.nccl_tests) / name).resolve() for name in names]


class PlanJob(_Strict):
    id: str = Field(pattern=_ID)
    kind: JobKind = Field(strict=False)
    nodes: int = Field(gt=0)
    scope: Literal["full-scale", "cross-rack", "pair"] | None = None
    phase: Literal["efficiency", "scaling"] | None = None  # training jobs: the phase their runs count for
    repeats: int = Field(default=1, gt=0)  # training jobs: one Slurm job per repeat
    model: str = Field(default="cc-tiny-lm", pattern=_ID)  # training jobs: the catalog's workload id
    # training jobs: what the shipped workload computes in (NumPy float32); the bundle says what ran
    precision: Literal["fp32"] = "fp32"
    workload: Workload = Workload()
    collectives: Collectives = Collectives()
    faults: list[Fault] = Field(default_factory=list)
    time_limit_min: int = Field(default=15, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> PlanJob:
        given = self.model_fields_set
        if self.kind is not JobKind.TRAINING:
            extra = [k for k in ("phase", "repeats", "model", "precision") if k in given]
            if extra:
                raise ValueError(f"{', '.join(extra)} apply to training jobs only")
        if self.kind is not JobKind.COLLECTIVE and "collectives" in given:
            raise ValueError("collectives applies to collective jobs only")
        if self.kind is JobKind.TRAINING:
            if self.phase is None:
                raise ValueError("a training job needs a phase (efficiency or scaling)")
            if self.scope is not None:
                raise ValueError("scope applies to collective jobs only")
            if self.faults:
                raise ValueError("faults apply to resilience jobs only (a training job measures a clean run)")
            detector = [k for k in ("straggler_threshold", "straggler_window") if k in self.workload.model_fields_set]
            if detector:
                raise ValueError(f"workload.{detector[0]} applies to resilience jobs only (a training job runs "
                                 "with the straggler detector off: a measurement does not stop itself)")
        if self.kind is JobKind.COLLECTIVE:
            if self.scope is None:
                raise ValueError("a collective job needs a scope (full-scale, cross-rack or pair)")
            if self.faults:
                raise ValueError("faults apply to resilience jobs only")
            if self.scope == "pair" and self.nodes != 2:
                raise ValueError(f"a pairwise sweep runs on 2 nodes per job, got nodes: {self.nodes}")
            if self.nodes < 2:
                raise ValueError(f"a collective needs at least 2 nodes, got {self.nodes}")
        for fault in self.faults:
            if fault.at_step >= self.workload.steps:
                raise ValueError(f"fault at_step {fault.at_step} is past the run's last step "
                                 f"({self.workload.steps - 1})")
        return self


class System(_Strict):
    id: str = Field(pattern=_ID)  # the system id of the catalog (bundle.yaml system.gpu)
    devices_per_node: int = Field(default=1, gt=0)


class SlurmOptions(_Strict):
    partition: str | None = Field(default=None, pattern=_PARTITIONS)
    poll_s: float = Field(default=1.0, gt=0)
    # the interpreter jobs run (default: the one running clustercert)
    python: str | None = Field(default=None, pattern=_PATH)
    # how long a job may pend while its partition has fewer nodes that can run it than it needs (drained, down)
    # before the run stops with an error: long enough for a cluster's own repair to return a node
    node_wait_s: float = Field(default=600.0, gt=0)


class Plan(_Strict):
    schema_version: Literal[1]
    cluster: Cluster
    system: System
    catalog: str = Field(min_length=1)
    recipe_version: str = Field(min_length=1)
    slurm: SlurmOptions = SlurmOptions()
    jobs: list[PlanJob] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Plan:
        seen: set[str] = set()
        for job in self.jobs:
            if job.id in seen:
                raise ValueError(f"job id '{job.id}' appears twice")
            seen.add(job.id)
        return self


def load_plan(path: Path) -> Plan:
    """Load a plan strictly; any problem raises PlanError with one line naming file, line and field."""
    return load_yaml_model(path, Plan, PlanError, hint=_HINT)
