"""`helm upgrade -f FILE|-` on the live shell: a values file becomes assignments that merge map by map and replace
lists whole, before any --set, as helm merges them (ia-004's alternative-values-file script uses `-f -`)."""

from __future__ import annotations

import io

from arena.live import helm
from arena.live.control import _leaves


def test_a_values_file_is_leaf_assignments_lists_whole():
    doc = {"erpnext": {"redis-queue": {"master": {"extraFlags": ["--maxmemory 128mb", "--maxmemory-policy noeviction"],
                                                  "persistence": {"enabled": True}}}}}
    assert _leaves(doc) == [
        (["erpnext", "redis-queue", "master", "extraFlags"], ["--maxmemory 128mb", "--maxmemory-policy noeviction"]),
        (["erpnext", "redis-queue", "master", "persistence", "enabled"], True)]


def test_helm_reads_dash_f_from_stdin_and_sends_files_before_sets(monkeypatch):
    sent = {}

    def call(method, path, body=None):
        sent.update(method=method, path=path, body=body)
        return 200, '{"revision": 2}'

    monkeypatch.setattr(helm, "_call", call)
    monkeypatch.setattr("sys.stdin", io.StringIO("erpnext:\n  redis-queue:\n    master:\n      extraFlags: [a, b]\n"))
    out, err, code = helm.run(["upgrade", "frappe", "/opt/charts/frappe", "--reuse-values", "--wait", "-f", "-",
                               "--set", "x.y=1"])
    assert code == 0, err
    assert sent["path"] == "/helm/frappe/upgrade"
    values = [{"erpnext": {"redis-queue": {"master": {"extraFlags": ["a", "b"]}}}}]
    assert sent["body"] == {"set": ["x.y=1"], "values": values, "reuse_values": True}


def test_an_unreadable_values_file_is_an_error_not_a_silent_upgrade(monkeypatch, tmp_path):
    monkeypatch.setattr(helm, "_call", lambda *a, **k: (_ for _ in ()).throw(AssertionError("must not be called")))
    out, err, code = helm.run(["upgrade", "frappe", "chart", "-f", str(tmp_path / "missing.yaml")])
    assert code == 1 and "cannot read values" in err
