"""Mirror a job folder from where it ran into the local campaign folder, verified by checksum.

Used by the Slurm executor's ``fetch`` (when a job ends, and for ``collect DIR``), over the
transport the executor already holds:

* one remote command lists every file with its size and SHA-256;
* a file whose local copy already has that checksum is skipped (idempotent);
* a download goes to ``<file>`` + :data:`~ncclbot_sweep.paths.PART_SUFFIX` and is renamed only
  after its size and checksum match; an interrupted download resumes from the partial file's
  size (and starts over if the result does not verify);
* while a job may still run, only its finished ``steps/`` folders (with an ``exit``
  marker) are copied, so a step still running is never half-collected; once the job has
  ended its whole folder is mirrored (see :func:`sync_tree`).

The other direction, :func:`push_tree`, uploads a local folder (a dataset a tuning job
reads) into a folder on the cluster, skipping the files already there with the same checksum;
:func:`local_listing` and :func:`listing_digest` name such a folder by its content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path, PurePosixPath

from ncclbot_sweep.errors import TransportError
from ncclbot_sweep.paths import PART_SUFFIX, CampaignPaths, StepFiles
from ncclbot_sweep.sweep.transport import RemoteFile, Transport, sha256_file

__all__ = ["CollectReport", "listing_digest", "local_listing", "push_tree", "sync_tree"]

log = logging.getLogger(__name__)

_EXIT_NAME = StepFiles(PurePosixPath(".")).exit_marker.name
_PROVENANCE = CampaignPaths(PurePosixPath(".")).provenance("job").name


@dataclasses.dataclass
class CollectReport:
    """What a collect or fetch did: counts of files and bytes, and steps seen."""

    files_fetched: int = 0
    files_resumed: int = 0
    files_unchanged: int = 0
    bytes_fetched: int = 0
    steps_collected: int = 0
    steps_unfinished: int = 0
    jobs: int = 0

    def add(self, other: CollectReport) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _finished_steps(files: list[RemoteFile]) -> tuple[set[str], set[str]]:
    """(finished, all) step folder names from a job folder listing."""
    finished, every = set(), set()
    for f in files:
        parts = f.rel.split("/")
        if len(parts) >= 3 and parts[0] == "steps":
            every.add(parts[1])
            if len(parts) == 3 and parts[2] == _EXIT_NAME:
                finished.add(parts[1])
    return finished, every


def _wanted(f: RemoteFile, finished: set[str]) -> bool:
    """While a job may run: finished steps, and provenance (written once, atomically).

    Job-level logs still grow then; they are copied once the job has ended.
    """
    parts = f.rel.split("/")
    if parts[0] != "steps":
        return f.rel == _PROVENANCE
    return len(parts) >= 3 and parts[1] in finished


def sync_tree(transport: Transport, remote: PurePosixPath, local: Path, *,
              job_ended: bool = False) -> CollectReport:
    """Copy the job folder ``remote`` into ``local``; see the module docstring.

    While the job may still run only finished steps are copied. Once it has ended
    (``job_ended``) every step folder is copied, including what a killed step left (its
    stdout tells the runner it had started), and step files that no longer exist on the
    cluster (a re-run removed them) are removed here too, so the local folder mirrors it.
    Idempotent and resumable. Raises TransportError when a file cannot be fetched or does
    not verify after a fresh download.
    """
    report = CollectReport(jobs=1)
    if transport.same_path(local, remote):
        return report
    files = transport.list_files(remote)
    finished, every = _finished_steps(files)
    report.steps_collected = len(finished)
    report.steps_unfinished = len(every - finished)
    for f in files:
        if job_ended or _wanted(f, finished):
            _fetch_one(transport, remote, local, f, report)
    if job_ended:
        _remove_stale(local, {f.rel for f in files}, every)
    return report


def _remove_stale(local: Path, remote_rels: set[str], steps: set[str]) -> None:
    for step in steps:
        folder = local / "steps" / step
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            rel = path.relative_to(local).as_posix()
            if path.is_file() and not path.name.endswith(PART_SUFFIX) and rel not in remote_rels:
                log.info("removing %s: the re-run on the cluster removed it", rel)
                path.unlink()


def _fetch_one(transport: Transport, remote: PurePosixPath, local: Path, f: RemoteFile,
               report: CollectReport) -> None:
    target = local / f.rel
    if target.is_file() and target.stat().st_size == f.size and sha256_file(target) == f.sha256:
        report.files_unchanged += 1
        return
    part = target.with_name(target.name + PART_SUFFIX)
    offset = part.stat().st_size if part.is_file() else 0
    if offset > f.size:
        part.unlink()
        offset = 0
    if offset:
        report.files_resumed += 1
        log.info("resuming %s at byte %d of %d", f.rel, offset, f.size)
    transport.get_file(remote / f.rel, part, offset=offset)
    if part.stat().st_size != f.size or sha256_file(part) != f.sha256:
        if not offset:
            raise TransportError(f"{f.rel}: the copy does not match the cluster's checksum "
                                 "(the file changed while it was copied?)", path=target,
                                 hint="run 'ncclbot-sweep collect' again once the job has ended")
        log.warning("%s did not verify after resuming; downloading it again", f.rel)
        transport.get_file(remote / f.rel, part, offset=0)
        if part.stat().st_size != f.size or sha256_file(part) != f.sha256:
            raise TransportError(f"{f.rel}: the copy does not match the cluster's checksum", path=target)
    os.replace(part, target)
    report.files_fetched += 1
    report.bytes_fetched += f.size - offset


def local_listing(local: Path) -> list[RemoteFile]:
    """Every file below ``local`` with size and SHA-256, as the remote listing gives them.

    Hidden files (a dataset's ``.ingest.lock``) and downloads in progress are left out: they
    are not content.
    """
    files = []
    for path in sorted(local.rglob("*")):
        rel = path.relative_to(local).as_posix()
        if not path.is_file() or path.name.endswith(PART_SUFFIX) or any(p.startswith(".") for p in rel.split("/")):
            continue
        files.append(RemoteFile(rel=rel, size=path.stat().st_size, sha256=sha256_file(path)))
    return files


def listing_digest(files: list[RemoteFile]) -> str:
    """A 16-hex-digit name for a folder's content: the same files and bytes give the same digest."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.rel):
        digest.update(f"{f.rel}\0{f.size}\0{f.sha256}\n".encode())
    return digest.hexdigest()[:16]


def push_tree(transport: Transport, local: Path, remote: PurePosixPath,
              files: list[RemoteFile] | None = None) -> int:
    """Upload the files of ``local`` (:func:`local_listing`, or ``files``) into ``remote``.

    A file whose remote copy already has the same size and checksum is skipped (one listing
    command), so pushing again sends nothing; an upload cut short is sent again next time.
    Returns the number of files sent. Remote files that ``local`` lacks are left alone.
    """
    if transport.same_path(local, remote):
        return 0
    files = local_listing(local) if files is None else files
    there = {f.rel: f for f in transport.list_files(remote)}
    sent = 0
    made: set[PurePosixPath] = set()
    for f in files:
        if there.get(f.rel) == f:
            continue
        target = remote / f.rel
        if target.parent not in made:
            transport.makedirs(target.parent)
            made.add(target.parent)
        transport.put_file(local / f.rel, target)
        sent += 1
    log.info("pushed %d of %d files of %s to %s", sent, len(files), local, remote)
    return sent
