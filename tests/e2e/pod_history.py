"""Every pod of a namespace, as the apiserver reported it over time: the chaos test's witness.

Why a watch and not polling: the chaos test asserts things that are true or false *between*
reads (two pods of one name alive at once, a gang running without one of its members), so it
needs every state the apiserver stored, in the apiserver's order. The recorder lists once, then
watches from that list's ``resourceVersion``; when the watch breaks (the apiserver restarted) it
resumes from the last version it saw, and when that version is too old (410 Gone) it lists again,
marking the pods missing from the new list as gone.

Invariants: the sequence numbers (``seq``) give one total order over everything recorded, across
resumed watches and re-lists; a pod's interval ``[first, gone)`` contains every state recorded
for it.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.conftest import Cluster

JOB_LABEL = "training.kubeflow.org/job-name"
ATTEMPT = "torchgate.io/gang-attempt"
NEVER = 1 << 62
"""The ``gone``/``ended`` of a pod that is still there at the end of the recording."""


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@dataclass(slots=True)
class PodRecord:
    """One pod (one uid) as seen over its life; times are recorder sequence numbers."""

    uid: str
    name: str
    job: str
    attempt: str
    owners: frozenset[str]
    first: int
    node: str = ""
    running: int | None = None
    ended: int = NEVER
    gone: int = NEVER
    phases: list[str] = field(default_factory=list)


class PodHistory:
    """Records the pods of one namespace in a thread; :meth:`stop` ends it."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        plane = cluster.plane
        self._server = plane.server
        self._token = plane.token
        self._context = ssl.create_default_context(
            cafile=str(plane.ca_file) if plane.ca_file else None
        )
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        self._lock = threading.Lock()
        self._seq = 0
        self._stopping = threading.Event()
        self._version: str | None = None
        self.pods: dict[str, PodRecord] = {}
        self.relists = 0
        self.resumed_watches = 0
        self._thread = threading.Thread(target=self._run, name="pod-history", daemon=True)

    def start(self) -> PodHistory:
        self._thread.start()
        return self

    def stop(self) -> dict[str, PodRecord]:
        """Stop recording; the records, by uid."""
        self._stopping.set()
        self._thread.join(timeout=60)
        with self._lock:
            return dict(self.pods)

    def _open(self, query: str, timeout: float) -> Any:
        request = urllib.request.Request(f"{self._server}{self._path}?{query}")
        request.add_header("Authorization", f"Bearer {self._token}")
        return urllib.request.urlopen(request, timeout=timeout, context=self._context)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._version is None:
                    self._version = self._relist()
                self._watch(self._version)
            except _Expired:
                self._version = None
            except urllib.error.HTTPError as error:
                if error.code == 410:
                    self._version = None
                time.sleep(0.5)
            except (OSError, ValueError):
                time.sleep(0.5)  # apiserver away: resume from the last version seen

    def _relist(self) -> str:
        with self._open("limit=0", timeout=60) as response:
            body = json.loads(response.read())
        with self._lock:
            self.relists += 1
            self._seq += 1
            present = set()
            for pod in body["items"]:
                present.add(pod["metadata"]["uid"])
                self._record(pod, deleted=False)
            for record in self.pods.values():
                if record.uid not in present and record.gone == NEVER:
                    record.gone = self._seq
                    record.ended = min(record.ended, self._seq)
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> None:
        query = f"watch=1&allowWatchBookmarks=true&timeoutSeconds=30&resourceVersion={version}"
        with self._open(query, timeout=45) as response:
            for line in response:
                if self._stopping.is_set():
                    break
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired
                    continue
                self._version = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    self._seq += 1
                    self._record(obj, deleted=kind == "DELETED")
        self.resumed_watches += 1

    def _record(self, pod: dict[str, Any], *, deleted: bool) -> None:
        metadata = pod["metadata"]
        record = self.pods.get(metadata["uid"])
        if record is None:
            record = PodRecord(
                uid=metadata["uid"],
                name=metadata["name"],
                job=metadata.get("labels", {}).get(JOB_LABEL, ""),
                attempt=metadata.get("annotations", {}).get(ATTEMPT, ""),
                owners=frozenset(
                    ref["uid"]
                    for ref in metadata.get("ownerReferences", [])
                    if ref.get("controller")
                ),
                first=self._seq,
            )
            self.pods[record.uid] = record
        record.node = pod.get("spec", {}).get("nodeName") or record.node
        phase = pod.get("status", {}).get("phase", "")
        if not record.phases or record.phases[-1] != phase:
            record.phases.append(phase)
        if phase == "Running" and record.running is None:
            record.running = self._seq
        if phase in ("Succeeded", "Failed") or metadata.get("deletionTimestamp") or deleted:
            record.ended = min(record.ended, self._seq)
        if deleted:
            record.gone = min(record.gone, self._seq)
