"""The live stack: real PostgreSQL, Redis, MariaDB and Prometheus on loopback, small Python app services and a
load generator, as the pods of an emulated Kubernetes API server (`arena.live.kubeapi`, `arena.live.cluster`), so
that the guard's production environment, `guardrail.envs.kubernetes.KubernetesEnvironment`, runs over it unchanged.

Sits beside `arena.twin` in the arena layer; the bench and the tests build a `LiveStack` and take its
`environment()`. See docs/live.md for what runs where and what is simplified.
"""
