"""`guardrail context init` against the emulated API server: the file it writes loads as a context and says what
to review; bad input is one line, exit 2, and nothing written."""

from __future__ import annotations

import base64

import pytest
from click.testing import CliRunner

from arena.live.kubeapi import KubeAPI
from guardrail.cli import _register, cli
from guardrail.context import load_context


@pytest.fixture
def cluster(tmp_path):
    with KubeAPI(ready_delay_s=0.0) as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "redis-config", "namespace": "shop"},
                    "data": {"redis.conf": "maxmemory 64mb\n"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-env", "namespace": "shop"},
                    "data": {"LOG_LEVEL": "info"}})
        api.create({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                    "metadata": {"name": "sh.helm.release.v1.shop.v3", "namespace": "shop",
                                 "labels": {"owner": "helm", "name": "shop", "version": "3", "status": "deployed"}},
                    "data": {"release": base64.b64encode(b"x").decode()}})
        for kind, name, spec in (
                ("Deployment", "web", {"containers": [{"name": "web", "image": "shop/web:4",
                                                       "envFrom": [{"configMapRef": {"name": "web-env"}}]}]}),
                ("StatefulSet", "redis", {"containers": [{"name": "redis", "image": "redis:7.0", "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/redis"}]}],
                    "volumes": [{"name": "conf", "configMap": {"name": "redis-config"}}]})):
            api.create({"apiVersion": "apps/v1", "kind": kind, "metadata": {
                "name": name, "namespace": "shop", "annotations": {"meta.helm.sh/release-name": "shop"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
        yield api, api.write_kubeconfig(tmp_path / "kubeconfig")


def run(*args):
    _register()
    return CliRunner().invoke(cli, ["context", "init", *args])


def test_init_writes_a_context_that_loads_and_marks_what_to_review(cluster, tmp_path):
    _, kubeconfig = cluster
    out = tmp_path / "ctx.yaml"
    res = run("--namespace", "shop", "--kubeconfig", str(kubeconfig), "--out", str(out),
              "--prometheus", "http://prometheus.monitoring:9090")
    assert res.exit_code == 0, res.output
    ctx = load_context(out)
    assert ctx.namespaces == ["shop"] and sorted(ctx.components) == ["redis", "web"]
    assert ctx.restartable == ["web"] and ctx.not_restartable == ["redis"]
    assert ctx.declared_sources == {"redis.*": "configmap/redis-config:redis.conf",
                                    "file:/etc/redis/*": "configmap/redis-config"}
    assert ctx.extra == {"helm_release": "shop"}
    text = out.read_text()
    assert text.count("# REVIEW") >= 4 and "--prometheus http://prometheus.monitoring:9090 --slo" in text
    assert "ConfigMap web-env (env (envFrom)): keys LOG_LEVEL" in text


def test_init_refuses_to_overwrite_without_force(cluster, tmp_path):
    _, kubeconfig = cluster
    out = tmp_path / "ctx.yaml"
    out.write_text("id: mine\n")
    res = run("--namespace", "shop", "--kubeconfig", str(kubeconfig), "--out", str(out))
    assert res.exit_code == 2 and "exists; pass --force" in res.output and out.read_text() == "id: mine\n"
    assert run("--namespace", "shop", "--kubeconfig", str(kubeconfig), "--out", str(out), "--force").exit_code == 0
    assert load_context(out).id == "shop"


@pytest.mark.parametrize("args, message", [
    (["--namespace", "nope"], "namespace 'nope' does not exist"),
    (["--namespace", "shop", "--prometheus", "prometheus:9090"], "is not an http(s) URL"),
])
def test_bad_input_exits_2_and_writes_nothing(cluster, tmp_path, args, message):
    _, kubeconfig = cluster
    out = tmp_path / "ctx.yaml"
    res = run(*args, "--kubeconfig", str(kubeconfig), "--out", str(out))
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_missing_kubeconfig_is_bad_input(tmp_path):
    res = run("--namespace", "shop", "--kubeconfig", str(tmp_path / "none"), "--out", str(tmp_path / "c.yaml"))
    assert res.exit_code == 2 and "no such kubeconfig file" in res.output
