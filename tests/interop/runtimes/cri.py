"""A small CRI (runtime v1) client: the calls a kubelet makes to set up and tear down a pod.

The messages are our own subset (cri_subset.proto), compiled once per test session with
grpcio-tools into a temp dir, so nothing generated is checked in.
"""

from __future__ import annotations

import atexit
import importlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

PROTO = Path(__file__).with_name("cri_subset.proto")
_compiled: dict[str, ModuleType] = {}


def _compile() -> tuple[ModuleType, ModuleType]:
    """Generate and import cri_subset_pb2 / cri_subset_pb2_grpc (once per process)."""
    if not _compiled:
        from grpc_tools import protoc

        out = Path(tempfile.mkdtemp(prefix="pycni-cri-proto-"))
        atexit.register(shutil.rmtree, out, True)
        code = protoc.main(
            [
                "protoc",
                f"-I{PROTO.parent}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                str(PROTO),
            ]
        )
        assert code == 0, f"protoc failed on {PROTO}"
        sys.path.insert(0, str(out))
        try:
            _compiled["pb2"] = importlib.import_module("cri_subset_pb2")
            _compiled["grpc"] = importlib.import_module("cri_subset_pb2_grpc")
        finally:
            sys.path.remove(str(out))
    return _compiled["pb2"], _compiled["grpc"]


@dataclass
class Sandbox:
    id: str
    config: Any  # PodSandboxConfig, kept for CreateContainer


class CRIClient:
    """RuntimeService over a unix socket; every call has a deadline."""

    def __init__(self, socket_path: Path, timeout: float = 60) -> None:
        self.pb, grpc_mod = _compile()
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.stub = grpc_mod.RuntimeServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def wait_ready(self, seconds: float = 30) -> str:
        """Poll Version until the CRI answers; returns "<runtime> <version>"."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                reply = self.stub.Version(self.pb.VersionRequest(version="v1"), timeout=2)
                return f"{reply.runtime_name} {reply.runtime_version} ({reply.runtime_api_version})"
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def sandbox_config(
        self, name: str, uid: str, ports: list[tuple[int, int]] | None = None
    ) -> Any:
        pb = self.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="pycni-test"),
            hostname=name,
            port_mappings=[
                pb.PortMapping(protocol=pb.TCP, container_port=c, host_port=h)
                for c, h in (ports or [])
            ],
        )

    def run_pod_sandbox(self, config: Any) -> Sandbox:
        reply = self.stub.RunPodSandbox(
            self.pb.RunPodSandboxRequest(config=config), timeout=self.timeout
        )
        return Sandbox(reply.pod_sandbox_id, config)

    def pod_ip(self, sandbox: Sandbox) -> str:
        reply = self.stub.PodSandboxStatus(
            self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id), timeout=self.timeout
        )
        return str(reply.status.network.ip)

    def start_container(self, sandbox: Sandbox, name: str, image: str, command: list[str]) -> str:
        pb = self.pb
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=image),
            command=command,
        )
        created = self.stub.CreateContainer(
            pb.CreateContainerRequest(
                pod_sandbox_id=sandbox.id, config=config, sandbox_config=sandbox.config
            ),
            timeout=self.timeout,
        )
        self.stub.StartContainer(
            pb.StartContainerRequest(container_id=created.container_id), timeout=self.timeout
        )
        return str(created.container_id)

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self.stub.StopPodSandbox(
            self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=self.timeout
        )

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self.stub.RemovePodSandbox(
            self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=self.timeout
        )

    def sandbox_ids(self) -> list[str]:
        reply = self.stub.ListPodSandbox(self.pb.ListPodSandboxRequest(), timeout=self.timeout)
        return [item.id for item in reply.items]
