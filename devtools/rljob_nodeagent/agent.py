"""The node agent: one Node, kept Ready, whose pods run as local processes.

Threads per agent: a heartbeat (the Node's Ready condition and its Lease), a watch on
the Node (deleting it makes the machine vanish: its processes are SIGKILLed and the
agent stops, as when a spot VM is reclaimed), a watch on the pods bound to the Node
(fieldSelector spec.nodeName), and one worker per pod that drives it through its life:
Pending -> Running -> terminated, SIGTERM on deletion and SIGKILL after the grace
period, then the final delete with grace 0 that a kubelet sends once the containers
are gone (the API server keeps the pod while other parties' finalizers remain).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from rljob_operator.api.timestamps import iso, iso_precise

from . import procs
from .render import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    MARKER_ENV,
    Exit,
    NodeShape,
    PodError,
    ReadinessProbe,
    Rewriter,
    claim_dir,
    command_line,
    container_mounts,
    downward_files,
    exit_code,
    exit_reason,
    key_files,
    lease_manifest,
    local_path,
    node_conditions,
    node_manifest,
    pending_status,
    pod_address,
    readiness_probe,
    resolve_env,
    running_status,
    terminated_status,
    termination_message,
)

log = logging.getLogger("rljob_nodeagent")

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
PASSTHROUGH_ENV = ("LANG", "LC_ALL", "TZ", "TMPDIR")
POLL_SECONDS = 0.2
ExtraEnv = Callable[[dict[str, Any]], dict[str, str]]
DEFAULT_SHAPE = NodeShape(cpu="16", memory="64Gi")  # a node of a workstation, not a p5


@dataclass
class LaunchRecord:
    """What the agent ran for one pod, and how it ended (for tests and the demo)."""

    namespace: str
    name: str
    uid: str
    node: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: Path
    pid: int
    started_at: str
    exit_code: int | None = None
    finished_at: str | None = None
    ended_by: str | None = None  # exit | deletion | node-deleted | agent-stopped
    labels: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def load_api(kubeconfig: str | Path) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def _json(response: Any) -> Any:
    return json.loads(response.data)


class NodeAgent:
    """One node. `start()` registers it and waits until it is Ready; `stop()` ends its pods'
    processes (SIGTERM, then SIGKILL after `grace` seconds) and, by default, deletes the Node."""

    def __init__(
        self,
        kubeconfig: str | Path,
        node: str,
        root: str | Path,
        shape: NodeShape = DEFAULT_SHAPE,
        labels: dict[str, str] | None = None,
        extra_env: ExtraEnv | None = None,
        bin_dir: str | Path | None = None,
        heartbeat_seconds: float = 10.0,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.node = node
        self.root = Path(root).resolve()
        self.shape = shape
        self.labels = dict(labels or {})
        self.extra_env = extra_env
        # The project's environment: `torchrun`, `python`, `rljob` resolve to this venv.
        self.bin_dir = Path(bin_dir) if bin_dir else Path(sys.executable).parent
        self.heartbeat_seconds = heartbeat_seconds
        self.api = load_api(self.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.records: list[LaunchRecord] = []
        self.gone = threading.Event()  # the Node was deleted: the machine vanished
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}
        self._finished: set[str] = set()
        self._heartbeat: threading.Thread | None = None
        self._watches: list[watch.Watch] = []
        self._ready_since = iso()
        self._stop_grace = 5.0
        self.node_uid = ""

    # ------------------------------------------------------------------ lifecycle
    def start(self, wait: bool = True, timeout: float = 60.0) -> NodeAgent:
        self.root.mkdir(parents=True, exist_ok=True)
        self._register()
        threads = [
            threading.Thread(target=target, name=f"{self.node}-{name}", daemon=True)
            for target, name in (
                (self._heartbeat_loop, "heartbeat"),
                (self._node_watch_loop, "node-watch"),
                (self._pod_watch_loop, "pod-watch"),
            )
        ]
        for thread in threads:
            thread.start()
        self._heartbeat = threads[0]  # the watches are not waited for: see stop
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the Node is Ready and carries no not-ready taint (the scheduler would skip it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self._read_node()
            if node is not None:
                conditions = node.get("status", {}).get("conditions") or []
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
                taints = [
                    t
                    for t in node.get("spec", {}).get("taints") or []
                    if t.get("key", "").startswith("node.kubernetes.io/")
                ]
                if ready and not taints:
                    return
            time.sleep(0.25)
        raise TimeoutError(f"node {self.node} did not become Ready in {timeout:.0f}s")

    def stop(self, delete_node: bool = True, grace: float = 5.0) -> None:
        """End every pod process and the agent's threads; leave no process behind."""
        self.stopping.set()
        self._stop_grace = grace
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.wake()
        for worker in workers:
            worker.join(grace + 10)
        self._close_watches()
        procs.kill_leftovers([self.node])
        if delete_node and not self.gone.is_set():
            with contextlib.suppress(ApiException):
                self.core.delete_node(self.node)
            with contextlib.suppress(ApiException):
                client.CoordinationV1Api(self.api).delete_namespaced_lease(
                    self.node, "kube-node-lease"
                )
        # The watch threads end at their next event or the server's timeout, acting on
        # nothing after this; only the heartbeat is waited for.
        if self._heartbeat is not None:
            self._heartbeat.join(2)

    def live_processes(self) -> list[int]:
        return procs.live_processes(self.node)

    def pod_dir(self, pod: dict[str, Any]) -> Path:
        meta = pod["metadata"]
        return (
            self.root
            / "nodes"
            / self.node
            / "pods"
            / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        )

    @staticmethod
    def scratch_dir(pod: dict[str, Any]) -> Path:
        """Where the pod's emptyDirs live: a short path, because programs put Unix sockets
        in them (Ray's temp dir), and a socket's path may not exceed 107 bytes."""
        return Path("/tmp") / f"rljob-na-{pod['metadata']['uid'][:12]}"

    def log_path(self, namespace: str, name: str) -> Path:
        return self.root / "logs" / namespace / f"{name}.log"

    # ------------------------------------------------------------------ the Node
    def _read_node(self) -> dict[str, Any] | None:
        try:
            return _json(self.core.read_node(self.node, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _register(self) -> None:
        body = node_manifest(self.node, self.shape, self.labels, self._ready_since)
        try:
            created = _json(self.core.create_node(body, _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:
                raise
            existing = self._read_node() or {}
            if KWOK_NODE_ANNOTATION in (existing.get("metadata", {}).get("annotations") or {}):
                raise RuntimeError(f"node {self.node} is a kwok node: pick another name") from exc
            self.core.patch_node(self.node, {"metadata": {"labels": body["metadata"]["labels"]}})
            created = _json(
                self.core.patch_node_status(
                    self.node, {"status": body["status"]}, _preload_content=False
                )
            )
        self.node_uid = created["metadata"]["uid"]
        self._renew_lease()
        log.info("node %s registered (%d GPUs)", self.node, self.shape.gpus)

    def _renew_lease(self) -> None:
        leases = client.CoordinationV1Api(self.api)
        body = lease_manifest(self.node, self.node_uid, iso_precise())
        try:
            leases.patch_namespaced_lease(
                self.node, "kube-node-lease", {"spec": {"renewTime": body["spec"]["renewTime"]}}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            with contextlib.suppress(ApiException):
                leases.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_seconds):
            if self.gone.is_set():
                return
            try:
                self.core.patch_node_status(
                    self.node,
                    {"status": {"conditions": node_conditions(iso(), self._ready_since)}},
                )
                self._renew_lease()
            except ApiException as exc:
                if exc.status == 404:
                    self._vanish("its Node object is gone")
                    return
                log.warning("node %s: heartbeat failed: %s", self.node, exc.reason)
            except Exception as exc:  # the API server may be going away with the cluster
                log.warning("node %s: heartbeat failed: %s", self.node, exc)

    def _vanish(self, why: str) -> None:
        """The machine is gone: its processes die at once, nothing more is reported."""
        if self.gone.is_set():
            return
        log.warning("node %s: %s; killing its processes as if the machine vanished", self.node, why)
        self.gone.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.wake()
        procs.kill_leftovers([self.node])
        self._close_watches()

    # ------------------------------------------------------------------ watches
    def _close_watches(self) -> None:
        """Each watch ends at its next event or server timeout, and acts on nothing more."""
        for follow in list(self._watches):
            follow.stop()

    def _done(self) -> bool:
        return self.stopping.is_set() or self.gone.is_set()

    def _watch(
        self,
        list_call: Callable[..., Any],
        selector: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """List, then follow the kubernetes client's Watch from the list's version (every
        event and bookmark moves it on); list again when it has expired (410) or after an
        error. The handlers get the objects as the API server sent them (dicts)."""
        while not self._done():
            try:
                listed = _json(list_call(field_selector=selector, _preload_content=False))
                on_list(listed["items"])
                follow = watch.Watch()
                follow.resource_version = listed["metadata"]["resourceVersion"]
                self._watches.append(follow)
                try:
                    while not self._done():
                        for event in follow.stream(
                            list_call,
                            field_selector=selector,
                            resource_version=follow.resource_version,
                            allow_watch_bookmarks=True,
                            timeout_seconds=30,
                            _request_timeout=(10, 60),
                        ):
                            if self._done():
                                return
                            if event["type"] != "BOOKMARK":
                                on_event(event["type"], event["raw_object"])
                finally:
                    self._watches.remove(follow)
            except Exception as exc:
                if self._done():
                    return
                expired = isinstance(exc, ApiException) and exc.status == 410
                if not expired:
                    log.debug("node %s: the watch of %s restarts: %s", self.node, selector, exc)
                    time.sleep(1)

    def _node_watch_loop(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            if not items:
                self._vanish("its Node object is gone")

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if kind == "DELETED":
                self._vanish("its Node object was deleted")

        self._watch(self.core.list_node, f"metadata.name={self.node}", on_list, on_event)

    def _pod_watch_loop(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            seen = {p["metadata"]["uid"] for p in items}
            for pod in items:
                self._on_pod("ADDED", pod)
            with self._lock:
                missing = [w for uid, w in self._workers.items() if uid not in seen]
            for worker in missing:
                worker.update(None)

        pods = self.core.list_pod_for_all_namespaces
        self._watch(pods, f"spec.nodeName={self.node}", on_list, self._on_pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            worker = self._workers.get(uid)
            if worker is None and kind != "DELETED" and uid not in self._finished:
                if self._done():
                    return
                worker = PodWorker(self, pod)
                self._workers[uid] = worker
                worker.start()
                return
        if worker is not None:
            worker.update(None if kind == "DELETED" else pod)

    def _worker_done(self, uid: str) -> None:
        with self._lock:
            self._workers.pop(uid, None)
            self._finished.add(uid)

    # ------------------------------------------------------------------ lookups for pods
    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = dict(found.data or {})
        for key, value in (found.binary_data or {}).items():
            data[key] = base64.b64decode(value).decode(errors="replace")
        return data

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = found.data or {}
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}


@dataclass
class _Prepared:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    termination_file: Path
    downward: list[tuple[Path, list[dict[str, Any]]]]  # volume dir, items: kept up to date
    readiness: ReadinessProbe | None = None


class ReadinessProber:
    """Runs a container's exec readiness probe every period, as a kubelet does, and reports
    each change of its verdict (after failureThreshold failures, successThreshold passes)."""

    def __init__(self, prepared: _Prepared, ready: bool, report: Callable[[bool], None]) -> None:
        self.probe, self.prepared, self.ready, self.report = (
            prepared.readiness,
            prepared,
            ready,
            report,
        )
        self.next_at = time.monotonic()
        self.streak = 0  # consecutive results that disagree with `ready`

    def tick(self) -> None:
        if self.probe is None or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.probe.period_seconds
        try:
            passed = subprocess.run(
                self.probe.argv, env=self.prepared.env, cwd=self.prepared.cwd,
                stdin=subprocess.DEVNULL, capture_output=True, timeout=self.probe.timeout_seconds,
            ).returncode == 0  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            passed = False
        self.streak = 0 if passed == self.ready else self.streak + 1
        needed = self.probe.success_threshold if passed else self.probe.failure_threshold
        if self.streak >= needed:
            self.ready, self.streak = passed, 0
            self.report(passed)


class PodWorker:
    """Drives one pod from bound to deleted."""

    def __init__(self, agent: NodeAgent, pod: dict[str, Any]) -> None:
        self.agent = agent
        self.pod: dict[str, Any] | None = pod
        self.last = pod  # the last version seen (kept after the pod is gone from the API)
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.marker = f"{agent.node}/{self.uid}"
        self.address = pod_address(self.uid)
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"{agent.node}-{self.name}", daemon=True
        )
        self.process: subprocess.Popen | None = None
        self.record: LaunchRecord | None = None
        self._downward_written: dict[Path, dict[str, str]] = {}

    # ------------------------------------------------------------------ plumbing
    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def update(self, pod: dict[str, Any] | None) -> None:
        with self._cond:
            self.pod = pod
            if pod is not None:
                self.last = pod
            self._cond.notify_all()

    def _wait(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait(seconds)

    @property
    def gone_from_api(self) -> bool:
        return self.pod is None

    def _deleting(self) -> bool:
        return self.pod is None or bool(self.pod["metadata"].get("deletionTimestamp"))

    def _grace(self) -> float:
        meta, spec = self.last["metadata"], self.last.get("spec", {})
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return float(grace)

    # ------------------------------------------------------------------ API calls
    def _patch_status(self, body: dict[str, Any]) -> None:
        if self.gone_from_api or self.agent.gone.is_set():
            return
        try:
            self.agent.core.patch_namespaced_pod_status(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)

    def _final_delete(self) -> None:
        """What a kubelet does once the containers are gone: delete with grace 0."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.uid)
        )
        try:
            self.agent.core.delete_namespaced_pod(self.name, self.namespace, body=options)
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: final delete failed: %s", self.namespace, self.name, exc)

    # ------------------------------------------------------------------ the life of a pod
    def _run(self) -> None:
        try:
            self._life()
        except Exception:
            log.exception("pod %s/%s: the agent failed running it", self.namespace, self.name)
            procs.send(procs.marked_processes(self.marker), signal.SIGKILL)
        finally:
            if self.process is not None:
                with contextlib.suppress(Exception):
                    self.process.wait(5)
            shutil.rmtree(self.agent.pod_dir(self.last), ignore_errors=True)
            shutil.rmtree(self.agent.scratch_dir(self.last), ignore_errors=True)
            self.agent._worker_done(self.uid)

    def _life(self) -> None:
        pod = self.last
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            self._await_deletion()
            return
        if self._was_started_elsewhere(pod):
            lost = "the node agent restarted and lost the container"
            self._report_exit(Exit(137, "ContainerStatusUnknown", lost, None, iso()))
            self._await_deletion()
            return
        if self._deleting():
            self._final_delete()
            return
        self._patch_status(pending_status(pod, iso(), self.address))
        try:
            try:
                prepared = self._prepare(pod)
            except (OSError, ApiException) as exc:  # a volume it cannot write, an API error
                raise PodError("CreateContainerError", str(exc)) from exc
        except PodError as exc:
            log.warning("pod %s/%s cannot run: %s", self.namespace, self.name, exc.message)
            waiting = {"waiting": {"reason": exc.reason, "message": exc.message}}
            self._patch_status({"status": {"containerStatuses": [{
                "name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                "restartCount": 0, "state": waiting,
            } for c in pod["spec"]["containers"]]}})  # fmt: skip
            self._await_deletion()
            return
        started_at = iso()
        log_path = self.agent.log_path(self.namespace, self.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with log_path.open("ab") as log_file:
                self.process = subprocess.Popen(
                    prepared.argv,
                    env=prepared.env,
                    cwd=prepared.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            self._report_exit(Exit(128, "StartError", f"cannot start {prepared.argv[0]}: {exc}",
                                   None, iso()))  # fmt: skip
            self._await_deletion()
            return
        container_id = f"rljob-nodeagent://{self.agent.node}/{self.process.pid}"
        self.record = LaunchRecord(
            self.namespace, self.name, self.uid, self.agent.node, prepared.argv, prepared.env,
            str(prepared.cwd), log_path, self.process.pid, started_at,
            labels=dict(pod["metadata"].get("labels") or {}),
        )  # fmt: skip
        with self.agent._lock:
            self.agent.records.append(self.record)
        log.info("pod %s/%s: started %s (pid %d)", self.namespace, self.name,
                 " ".join(prepared.argv), self.process.pid)  # fmt: skip
        ready = prepared.readiness is None
        self._patch_status(
            running_status(self.pod or pod, started_at, container_id, self.address, ready)
        )

        def report(now_ready: bool) -> None:
            self._patch_status(running_status(
                self.pod or pod, started_at, container_id, self.address, now_ready, iso()
            ))  # fmt: skip

        prober = ReadinessProber(prepared, ready, report)
        ended_by = self._supervise(prepared, prober)
        if ended_by in ("node-deleted", "agent-stopped"):
            return  # the machine is gone or switched off: nobody reports
        assert self.process.returncode is not None
        code = exit_code(self.process.returncode)
        self.record.exit_code, self.record.finished_at = code, iso()
        self.record.ended_by = ended_by
        message = termination_message(
            _read(prepared.termination_file),
            self.record.log(),
            pod["spec"]["containers"][0].get("terminationMessagePolicy", "File"),
            code,
        )
        exit = Exit(code, exit_reason(code), message, started_at, self.record.finished_at)
        log.info("pod %s/%s: exited %d (%s)", self.namespace, self.name, code, ended_by)
        self._report_exit(exit, container_id)
        self._await_deletion()

    def _was_started_elsewhere(self, pod: dict[str, Any]) -> bool:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if (status.get("state") or {}).get("running"):
                return True
        return False

    def _report_exit(self, exit: Exit, container_id: str = "") -> None:
        self._patch_status(
            terminated_status(self.pod or self.last, exit, container_id, self.address)
        )

    def _await_deletion(self) -> None:
        while not (self.agent._done() or self._deleting()):
            self._wait(1.0)
        if self.agent._done() or self.gone_from_api:
            return
        self._final_delete()

    def _supervise(self, prepared: _Prepared, prober: ReadinessProber) -> str:
        """Wait for the process; on deletion SIGTERM it, SIGKILL after the grace period."""
        assert self.process is not None
        deadline: float | None = None
        ended_by = "exit"
        while self.process.poll() is None:
            if self.agent.gone.is_set():
                procs.send(procs.marked_processes(self.marker), signal.SIGKILL)
                self.process.wait()
                self._mark_end("node-deleted")
                return "node-deleted"
            if deadline is None and (self._deleting() or self.agent.stopping.is_set()):
                stopping = self.agent.stopping.is_set() and not self._deleting()
                grace = self.agent._stop_grace if stopping else self._grace()
                ended_by = "agent-stopped" if stopping else "deletion"
                deadline = time.monotonic() + grace
                log.info("pod %s/%s: SIGTERM (grace %.0fs)", self.namespace, self.name, grace)
                procs.send([self.process.pid], signal.SIGTERM)  # PID 1's, as a runtime does
            if deadline is not None and time.monotonic() >= deadline:
                log.info("pod %s/%s: grace period over: SIGKILL", self.namespace, self.name)
                procs.send(procs.marked_processes(self.marker), signal.SIGKILL)
                procs.signal_group(self.process.pid, signal.SIGKILL)
                deadline = time.monotonic() + 3600
            self._sync_downward(prepared)
            if deadline is None:
                prober.tick()
            self._wait(POLL_SECONDS)
        # The container ends with its first process: whatever it left behind goes too.
        for _ in range(50):
            left = procs.marked_processes(self.marker)
            if not left:
                break
            procs.send(left, signal.SIGKILL)
            time.sleep(0.1)
        if self.agent.gone.is_set():  # the machine vanished under it (and killed it)
            ended_by = "node-deleted"
        if ended_by in ("agent-stopped", "node-deleted"):
            self._mark_end(ended_by)
        return ended_by

    def _mark_end(self, ended_by: str) -> None:
        if self.record is not None and self.process is not None:
            self.record.exit_code = exit_code(self.process.returncode or 0)
            self.record.finished_at = iso()
            self.record.ended_by = ended_by

    # ------------------------------------------------------------------ volumes and env
    def _sync_downward(self, prepared: _Prepared) -> None:
        """Keep downward-API files current: the operator annotates pods to ask for a save."""
        if self.pod is None:
            return
        container = self.pod["spec"]["containers"][0]
        for directory, items in prepared.downward:
            files = downward_files(self.pod, container, items)
            if self._downward_written.get(directory) != files:
                _write_files(directory, files)
                self._downward_written[directory] = files

    def _prepare(self, pod: dict[str, Any]) -> _Prepared:
        spec = pod["spec"]
        containers = spec["containers"]
        if len(containers) != 1:
            raise PodError("CreateContainerConfigError", "the agent runs one container per pod")
        container = containers[0]
        base = self.agent.pod_dir(pod)
        base.mkdir(parents=True, exist_ok=True)
        volumes: dict[str, Path] = {}
        downward: list[tuple[Path, list[dict[str, Any]]]] = []
        for volume in spec.get("volumes") or []:
            volumes[volume["name"]] = self._volume(pod, container, volume, base, downward)
        mounts = container_mounts(container, volumes)
        for local in mounts.values():  # a subPath that does not exist yet is made a folder
            if not Path(local).exists():
                Path(local).mkdir(parents=True)
        message_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
        termination_file = base / "termination-log"
        termination_file.write_text("")
        rewrite = Rewriter({**mounts, message_path: str(termination_file)})

        env = resolve_env(pod, container, self.agent.config_map, self.agent.secret)
        argv = command_line(container, env, rewrite)
        home = base / "home"
        home.mkdir(exist_ok=True)
        process_env = {
            "PATH": f"{self.agent.bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home),
            "HOSTNAME": spec.get("hostname") or self.name,
            **{k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ},
        }
        process_env.update({k: rewrite(v) for k, v in env.items()})
        if self.agent.extra_env:
            process_env.update(self.agent.extra_env(pod))
        process_env[MARKER_ENV] = self.marker
        working = container.get("workingDir")
        if working:
            cwd = Path(local_path(working, mounts) or base / "root" / working.lstrip("/"))
        else:
            cwd = base / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        resolved = shutil.which(argv[0], path=process_env["PATH"])
        if resolved is None:
            path = process_env["PATH"]
            raise PodError("StartError", f"executable {argv[0]!r} not found in {path}")
        probe = readiness_probe(container, env, rewrite)
        prepared = _Prepared(argv, process_env, cwd, termination_file, downward, probe)
        self._sync_downward(prepared)
        return prepared

    def _volume(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        volume: dict[str, Any],
        base: Path,
        downward: list[tuple[Path, list[dict[str, Any]]]],
    ) -> Path:
        name, namespace = volume["name"], self.namespace
        local = base / "volumes" / name
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            shared = claim_dir(self.agent.root, namespace, claim)
            shared.mkdir(parents=True, exist_ok=True)
            return shared
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            return path
        if "emptyDir" in volume:
            local = self.agent.scratch_dir(pod) / name
            local.mkdir(parents=True, exist_ok=True)
            return local
        local.mkdir(parents=True, exist_ok=True)
        if "downwardAPI" in volume:
            downward.append((local, volume["downwardAPI"].get("items") or []))
            return local
        for kind, lookup in (("configMap", self.agent.config_map), ("secret", self.agent.secret)):
            if kind in volume:
                source = volume[kind]
                ref = source.get("name") or source.get("secretName", "")
                data = lookup(namespace, ref)
                if data is None:
                    if source.get("optional"):
                        return local
                    raise PodError("CreateContainerConfigError", f'{kind} "{ref}" not found')
                _write_files(local, key_files(data, source.get("items")))
                return local
        if "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                if "downwardAPI" in source:
                    downward.append((local, source["downwardAPI"].get("items") or []))
                elif "configMap" in source or "secret" in source:
                    kind = "configMap" if "configMap" in source else "secret"
                    ref = source[kind].get("name", "")
                    lookup = self.agent.config_map if kind == "configMap" else self.agent.secret
                    data = lookup(namespace, ref)
                    if data is None and not source[kind].get("optional"):
                        raise PodError("CreateContainerConfigError", f'{kind} "{ref}" not found')
                    _write_files(local, key_files(data or {}, source[kind].get("items")))
            return local
        kinds = sorted(set(volume) - {"name"})
        raise PodError("CreateContainerConfigError", f"volume {name!r}: {kinds} is not supported")


def _write_files(directory: Path, files: dict[str, str]) -> None:
    """Each file written whole (temp file, then rename), as the kubelet's atomic writer does."""
    for relative, content in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(content)
        os.replace(tmp, target)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


# ---------------------------------------------------------------------- several agents
class AgentPool:
    """Several agents in this process (threads), started and stopped together.

    with AgentPool(kubeconfig, root, ["n0", "n1"], NodeShape(gpus=1)) as pool: ...
    """

    def __init__(
        self,
        kubeconfig: str | Path,
        root: str | Path,
        nodes: list[str],
        shape: NodeShape = DEFAULT_SHAPE,
        labels: dict[str, str] | None = None,
        extra_env: ExtraEnv | None = None,
        heartbeat_seconds: float = 10.0,
    ) -> None:
        self.agents = {
            name: NodeAgent(kubeconfig, name, root, shape, labels, extra_env,
                            heartbeat_seconds=heartbeat_seconds)
            for name in nodes
        }  # fmt: skip

    def start(self, timeout: float = 60.0) -> AgentPool:
        for agent in self.agents.values():
            agent.start(wait=False)
        for agent in self.agents.values():
            agent.wait_ready(timeout)
        return self

    def stop(self, delete_nodes: bool = True, grace: float = 5.0) -> None:
        threads = [
            threading.Thread(target=a.stop, args=(delete_nodes, grace), daemon=True)
            for a in self.agents.values()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(grace + 30)
        procs.kill_leftovers(list(self.agents))

    def __enter__(self) -> AgentPool:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def __getitem__(self, node: str) -> NodeAgent:
        return self.agents[node]

    @property
    def nodes(self) -> list[str]:
        return list(self.agents)

    def records(self) -> list[LaunchRecord]:
        every = [r for a in self.agents.values() for r in a.records]
        return sorted(every, key=lambda r: (r.started_at, r.name))

    def live_processes(self) -> list[int]:
        return sorted(p for a in self.agents.values() for p in a.live_processes())
