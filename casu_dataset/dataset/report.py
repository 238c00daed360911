"""What a build reports: the scenes built, skipped and cached, its stage seconds, the lock it
followed or wrote, the written folder's identity and cue checks, and what its workers loaded."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BuildReport:
    built: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    cached: int = 0
    seconds: dict = field(default_factory=dict)
    review: dict | None = None  # counts from the decisions file, when one was applied
    lock: dict | None = None  # the lock followed or written: {file, sha256, library_sha256, mode}
    drift: list[dict] = field(default_factory=list)  # per scene, when a lock was followed
    identity: dict | None = None  # build_manifest.identity of the written folder
    cues: dict | None = None  # cue_checks.summary of the written folder (contrast families)
    workers: dict = field(default_factory=dict)  # the executor's: worker_models (pid -> models loaded), ...

    def realization_summary(self) -> dict | None:
        """Reproduced/drifted counts of a locked build (None when no lock was followed)."""
        if not self.lock or self.lock.get("mode") != "followed":
            return None
        from casu_dataset.formats.lock import drift_summary

        return drift_summary(self.drift)
