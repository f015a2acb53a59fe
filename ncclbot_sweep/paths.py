"""The campaign folder layout, in one place (architecture section 4).

```
<campaign>/campaign.yaml  inventory.yaml  manifest.sqlite  .runner.lock  .executor/
<campaign>/jobs/<job-key>/job.sh  job.log  provenance.json  coordinator.log  slurm-<id>.out
<campaign>/jobs/<job-key>/steps/<step-key>/{step.json, stdout.txt, stderr.txt, nccl.log, result.json, exit, trace/}
<campaign>/jobs/<job-key>/steps/<step-key>/{workload_steps.csv, kineto/}      (workload runs)
```

A tuning job (``analyze tune -i``) runs in the tuning folder itself (:class:`TuneJobFiles`):
``<tune>/job.sh  job.log  provenance.json  slurm-<id>.out  workers/<id>-<task>-<host>.log`` beside
the studies and outputs the analysis writes there.

``.runner.lock`` is held by the one ``submit``/``resume`` that runs the campaign
(:mod:`ncclbot_sweep.sweep.campaign_folder`); ``.executor/`` is the local executor's state. A
file not finished yet (a download, or a write in progress: :mod:`ncclbot_sweep.atomicfile`)
is ``<file>.ncclbot-part`` (:data:`PART_SUFFIX`). ``step.json`` is
written when the job is rendered and says what the step is (campaign, fabric, kind,
collective, nodes, ranks, arm or policy, environment); ingest reads it so a step folder
explains itself. ``result.json`` is nccl-tests' ``-J`` output.

The same layout holds locally and on the cluster; only the root differs. Nothing else in
the package spells these file names.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePath, Path

__all__ = ["COORDINATOR_LOG", "JOB_LOG", "JOB_SCRIPT", "PART_SUFFIX", "PROVENANCE", "SLURM_OUTPUT", "STEP_META",
           "CampaignPaths", "StepFiles", "TuneJobFiles", "slurm_output_pattern"]

#: The job script, in every job folder (the executors submit it).
JOB_SCRIPT = "job.sh"
#: What a step is, in every step folder (ingest finds steps by it).
STEP_META = "step.json"
#: Suffix of a file not finished yet (a download, or a write in progress); the remote listing,
#: the mirror and ingest ignore such files.
PART_SUFFIX = ".ncclbot-part"
#: The coordinator's log in a live job's folder.
COORDINATOR_LOG = "coordinator.log"
#: Slurm's own output of a batch job (``sbatch --output``; ``%j`` is the job id).
SLURM_OUTPUT = "slurm-%j.out"
#: The job script's own log (step starts and ends, provenance warnings).
JOB_LOG = "job.log"
#: What the job ran on (hosts, GPUs, versions, environment), captured once per job.
PROVENANCE = "provenance.json"


@dataclasses.dataclass(frozen=True)
class StepFiles:
    """The files one step writes into its folder."""

    root: PurePath

    @property
    def meta(self) -> PurePath:
        """What the step is, written at render time (see the module docstring)."""
        return self.root / STEP_META

    @property
    def stdout(self) -> PurePath:
        return self.root / "stdout.txt"

    @property
    def nccl_log(self) -> PurePath:
        return self.root / "nccl.log"

    @property
    def result_json(self) -> PurePath:
        return self.root / "result.json"

    @property
    def stderr(self) -> PurePath:
        return self.root / "stderr.txt"

    @property
    def trace_dir(self) -> PurePath:
        """Where the plugin writes its per-rank trace CSVs (``NCCLBOT_TRACE_DIR``) in live steps."""
        return self.root / "trace"

    @property
    def workload_steps(self) -> PurePath:
        """A workload run's step times (``templates/step_times.py``), which ingest reads into ``workload_steps``."""
        return self.root / "workload_steps.csv"

    @property
    def kineto_dir(self) -> PurePath:
        """Where a workload run's command writes its Kineto traces (``NCCLSWEEP_KINETO_DIR``)."""
        return self.root / "kineto"

    @property
    def exit_marker(self) -> PurePath:
        """Holds the step's exit code, written last: its presence means the step finished."""
        return self.root / "exit"


def slurm_output_pattern(job_dir: PurePath) -> str:
    """Where Slurm writes a job's own stdout and stderr (``slurm-<id>.out`` in ``job_dir``), as an
    ``sbatch --output``/``--error`` pattern: a ``%`` in the folder is doubled, so Slurm does not read
    it as one of its replacements (``%j``)."""
    return f"{str(job_dir).replace('%', '%%')}/{SLURM_OUTPUT}"


@dataclasses.dataclass(frozen=True)
class CampaignPaths:
    """Paths of one campaign folder; ``root`` may be local (Path) or remote (PurePosixPath)."""

    root: PurePath

    @classmethod
    def local(cls, root: str | Path) -> CampaignPaths:
        return cls(Path(root))

    @property
    def campaign_yaml(self) -> PurePath:
        return self.root / "campaign.yaml"

    @property
    def inventory_yaml(self) -> PurePath:
        return self.root / "inventory.yaml"

    @property
    def manifest(self) -> PurePath:
        return self.root / "manifest.sqlite"

    @property
    def measured_times(self) -> PurePath:
        """The measured times the plan was priced with (``submit --from-dataset``), when it was."""
        return self.root / "measured-times.json"

    @property
    def runner_lock(self) -> PurePath:
        """Held (``flock``) by the one command that runs the campaign; holds that command's pid."""
        return self.root / ".runner.lock"

    @property
    def executor_state(self) -> PurePath:
        """Where an executor may keep state of its own (the local executor's job records)."""
        return self.root / ".executor"

    @property
    def jobs_dir(self) -> PurePath:
        return self.root / "jobs"

    def job_dir(self, job_key: str) -> PurePath:
        return self.jobs_dir / job_key

    def job_script(self, job_key: str) -> PurePath:
        return self.job_dir(job_key) / JOB_SCRIPT

    def job_log(self, job_key: str) -> PurePath:
        """The job script's own log (step starts and ends, provenance warnings)."""
        return self.job_dir(job_key) / JOB_LOG

    def coordinator_log(self, job_key: str) -> PurePath:
        return self.job_dir(job_key) / COORDINATOR_LOG

    def provenance(self, job_key: str) -> PurePath:
        return self.job_dir(job_key) / PROVENANCE

    def step_dir(self, job_key: str, step_key: str) -> PurePath:
        return self.job_dir(job_key) / "steps" / step_key

    def step_files(self, job_key: str, step_key: str) -> StepFiles:
        return StepFiles(self.step_dir(job_key, step_key))


@dataclasses.dataclass(frozen=True)
class TuneJobFiles:
    """The files a tuning job writes into the tuning folder ``root`` (local or remote)."""

    root: PurePath

    @property
    def job_script(self) -> PurePath:
        return self.root / JOB_SCRIPT

    @property
    def job_log(self) -> PurePath:
        return self.root / JOB_LOG

    @property
    def provenance(self) -> PurePath:
        return self.root / PROVENANCE

    @property
    def workers_dir(self) -> PurePath:
        """One log per task of each job: ``<job id>-<task>-<host>.log`` (srun's ``--output``)."""
        return self.root / "workers"
