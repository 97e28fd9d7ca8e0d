"""The Slurm backend: sbatch, scontrol, sacct, scancel and sinfo, called as a user would call them."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

from clustercert.runner.plan import RunnerError

__all__ = ["SACCT_FIELDS", "TERMINAL", "NodeState", "Slurm"]

SACCT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode,Submit,Start,End,Elapsed,NNodes,NodeList"
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                      "DEADLINE", "PREEMPTED", "REVOKED"})
_KV = re.compile(r"(\w+)=(\S*)")
# sinfo's long node states (%T) in which a node starts no job until someone or something acts on it (an operator's
# resume, a repair); a state may carry flags after '+' (`idle+drain`) and a mark of its own (`down*`: not responding)
_UNUSABLE = frozenset({"drain", "drained", "draining", "down", "fail", "failing", "maint", "inval", "future"})
_MARKS = "*~#%$@!^-"


@dataclass(frozen=True)
class NodeState:
    """One node as sinfo shows it: its long state (%T) and the reason given for it (%E, 'none' when none)."""

    name: str
    state: str
    reason: str

    @property
    def usable(self) -> bool:
        """Whether Slurm may start a job on the node as it is (busy, idle, powered down: yes; drained, down: no)."""
        return not any(part.rstrip(_MARKS).lower() in _UNUSABLE for part in self.state.split("+"))


class Slurm:
    """Runs Slurm's commands (SLURM_CONF from the environment picks the cluster)."""

    def __init__(self, local_tz: tzinfo, timeout_s: float = 60.0) -> None:
        self.tz = local_tz
        self.timeout_s = timeout_s

    def _run(self, args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(list(args), capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            raise RunnerError(f"{args[0]}: expected Slurm's commands on PATH, got none. Install slurm-client "
                              "or start the local cluster (scripts/slurm-local start)") from None
        except subprocess.TimeoutExpired:
            raise RunnerError(f"{' '.join(args)}: expected an answer within {self.timeout_s:.0f} s, got none. "
                              "Is slurmctld up (scontrol ping)?") from None
        if check and done.returncode != 0:
            err = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise RunnerError(f"{' '.join(args[:3])}: expected exit 0, got {done.returncode} "
                              f"({err[-1] if err else 'no message'}). Check that Slurm answers here (`scontrol ping`; "
                              "SLURM_CONF names the cluster; the local one: scripts/slurm-local status)")
        return done

    def sbatch(self, script: str) -> str:
        out = self._run(["sbatch", "--parsable", script]).stdout.strip()
        job = out.split(";")[0]
        if not job.isdigit():
            raise RunnerError(f"sbatch {script}: expected a job id, got {out!r}")
        return job

    def job(self, job_id: str) -> dict[str, str] | None:
        """`scontrol show job -o ID` as a mapping; None when slurmctld no longer knows the job."""
        done = self._run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode != 0 or "JobId=" not in done.stdout:
            return None
        return dict(_KV.findall(done.stdout))

    def hostnames(self, nodelist: str) -> list[str]:
        if not nodelist or nodelist in ("(null)", "None"):
            return []
        return self._run(["scontrol", "show", "hostnames", nodelist]).stdout.split()

    def nodes(self) -> list[str]:
        return sorted(set(self._run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()))

    def node_states(self, partitions: Sequence[str] = ()) -> list[NodeState]:
        """Every node of `partitions` (all when none) with its state and reason, each once."""
        args = ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]
        if partitions:
            args += ["-p", ",".join(partitions)]
        seen: dict[str, NodeState] = {}
        for line in self._run(args).stdout.splitlines():
            name, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")  # a reason is free text: it may hold '|'
            if name.strip() and name.strip() not in seen:
                seen[name.strip()] = NodeState(name.strip(), state.strip(), reason.strip())
        return list(seen.values())

    def node_state(self, node: str) -> str:
        return self._run(["sinfo", "-h", "-n", node, "-o", "%t"]).stdout.strip()

    def set_down(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=down", f"reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=resume"])

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id], check=False)

    def sacct(self, job_id: str) -> str:
        """Every incarnation of the job and its steps (`--duplicates`), with the header line."""
        return self._run(["sacct", "-j", job_id, "--parsable2", "--duplicates", f"--format={SACCT_FIELDS}"]).stdout

    def when(self, value: str | None) -> datetime | None:
        """A Slurm time (local, no offset) as an aware datetime; None for Unknown/None."""
        if not value or value in ("Unknown", "None", "N/A"):
            return None
        return datetime.fromisoformat(value).replace(tzinfo=self.tz)
