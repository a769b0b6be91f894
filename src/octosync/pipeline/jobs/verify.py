"""``octosync pipeline verify``: replay every stream's frames and every shared document's
edits, and report what is wrong.

Stream checks are those of :func:`octosync.pipeline.transforms.frames.frame_problems` (gaps,
duplicate epochs, overlaps, deltas before a snapshot, state hashes that disagree about one
epoch). The frames' payloads are the producers' own encodings, so verify compares the hashes
producers sent; it does not recompute them. Shared documents are checked by their kind's
``problems`` (``transforms.documents``: a counter whose tallies went down, an entry written by
a replica that does not own it); their problems carry epoch 0.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from octosync.pipeline.inputs import read_dataset, read_frames, resolve_export
from octosync.pipeline.jobs._stages import Progress, quiet, stage
from octosync.pipeline.transforms import documents as doc_transforms
from octosync.pipeline.transforms import frames as transforms


class StreamReport(msgspec.Struct, frozen=True):
    stream: str
    frames: int
    snapshots: int
    min_epoch: int
    max_epoch: int
    problems: int
    first_bad_epoch: int | None


class Problem(msgspec.Struct, frozen=True):
    stream: str
    epoch: int
    seq: int
    problem: str
    detail: str


class DocumentReport(msgspec.Struct, frozen=True):
    document: str
    edits: int
    writers: int
    problems: int


class VerifyResult(msgspec.Struct, frozen=True):
    streams: list[StreamReport]
    problems: list[Problem]
    documents: list[DocumentReport] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self, max_problems: int = 50) -> str:
        lines = [
            f"{len(self.streams)} streams, {len(self.documents)} shared documents, "
            f"{len(self.problems)} problems"
        ]
        for s in self.streams:
            status = (
                "ok"
                if s.problems == 0
                else f"{s.problems} problems, first bad epoch {s.first_bad_epoch}"
            )
            lines.append(
                f"  {s.stream}: {s.frames} frames ({s.snapshots} snapshots), "
                f"epochs {s.min_epoch}..{s.max_epoch}: {status}"
            )
        for d in self.documents:
            status = "ok" if d.problems == 0 else f"{d.problems} problems"
            lines.append(f"  {d.document}: {d.edits} edits by {d.writers} writers: {status}")
        for p in self.problems[:max_problems]:
            lines.append(f"  ! {p.stream} epoch {p.epoch} (seq {p.seq}): {p.problem}: {p.detail}")
        if len(self.problems) > max_problems:
            lines.append(f"  ... and {len(self.problems) - max_problems} more")
        return "\n".join(lines)


def run(spark: Any, journal: Path, *, progress: Progress = quiet) -> VerifyResult:
    journal = Path(journal)
    with stage("read frames", journal, progress):
        source = resolve_export(journal, progress)
        frames = read_frames(spark, source)
    with stage("replay streams", source, progress):
        problems_df = transforms.frame_problems(frames)
        problems = [
            Problem(r["stream"], r["epoch"], r["seq"], r["problem"], r["detail"])
            for r in problems_df.orderBy("stream", "epoch", "seq", "problem").collect()
        ]
        streams = [
            StreamReport(**r.asDict())
            for r in transforms.stream_summary(frames, problems_df).orderBy("stream").collect()
        ]
    with stage("replay shared documents", source, progress):
        read = partial(read_dataset, spark, source)
        found = doc_transforms.all_problems(read).orderBy("document", "seq", "problem").collect()
        doc_problems = [
            Problem(r["document"], 0, r["seq"], r["problem"], r["detail"]) for r in found
        ]
        per_doc = {
            r["document"]: r
            for r in doc_transforms.document_summary(doc_transforms.all_edits(read)).collect()
        }
        counts: dict[str, int] = {}
        for p in doc_problems:
            counts[p.stream] = counts.get(p.stream, 0) + 1
        docs = [
            DocumentReport(d, int(r["edits"]), int(r["writers"]), counts.get(d, 0))
            for d, r in sorted(per_doc.items())
        ]
    progress(
        f"{len(streams)} streams and {len(docs)} shared documents checked, "
        f"{len(problems) + len(doc_problems)} problems"
    )
    return VerifyResult(streams, problems + doc_problems, docs)
