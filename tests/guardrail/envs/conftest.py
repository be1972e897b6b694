"""Fixtures for the Kubernetes environment's tests: the emulated API server on 127.0.0.1 (port 0), a kubeconfig
in tmp_path, and one ManualClock shared by the emulator and the environment, whose every sleep runs one controller
pass (`stepped`) or none (the controller stopped: the negative control)."""

from __future__ import annotations

import pytest

from arena.live.kubeapi import KubeAPI
from tests.verifiers.fakes import ManualClock

NAMESPACE = "shop"


def workload(kind: str, name: str, replicas: int = 2, image: str = "example/app:1.0", **spec) -> dict:
    pod_spec = spec.pop("pod_spec", {})
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, **spec,
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": name, "image": image}], **pod_spec}}}}


@pytest.fixture
def clock():
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def api(clock):
    a = KubeAPI(clock=clock, ready_delay_s=5.0, seed=7).start(controller=False)
    a.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield a
    a.stop()


@pytest.fixture
def stepped(api, clock):
    """The controller runs one pass at every tick of the shared clock (and once now)."""
    clock.on_advance.append(lambda t: api.controller.reconcile())
    api.controller.reconcile()
    return api


@pytest.fixture
def kubeconfig(api, tmp_path):
    return api.write_kubeconfig(tmp_path / "kubeconfig", namespace="default")
