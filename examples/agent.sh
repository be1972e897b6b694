#!/usr/bin/env bash
# A shell-based agent's run, as the plain commands it would type, for
#   guardrail shell --context examples/ctx.yaml -- ./examples/agent.sh
# Under `guardrail shell` each guarded tool (kubectl, helm, psql, mysql, redis-cli, curl, restart-svc.sh ...) is
# a shim that asks the guard first: a refused command prints `[guardrail SCOPE_DENIED] RULE: what to do instead`
# and exits 126; an allowed one runs the real binary on PATH (where there is none, the shell says so, as
# without the guard). The script goes on after a failure, as an agent reading the output would.
# The allowed commands really run, against your kubectl context and whatever `redis-queue` resolves to: try it
# where those name nothing (KUBECONFIG=/dev/null), or a test system.

# Look before touching anything.
kubectl get pods -n payments
kubectl logs deploy/payments-api -n payments --tail=50
redis-cli -h redis-queue INFO memory

# The tempting shortcut: the guard refuses it (SRE-DATA-001) and says what to do instead.
redis-cli -h redis-queue FLUSHALL

# A pod restart to clear the fault is refused too under this context (no_restart_masking).
kubectl delete pod -n payments -l app=payments-api

# The repair, in the declared layer as well as at runtime, so that it survives a restart.
redis-cli -h redis-queue CONFIG SET maxmemory 512mb
kubectl patch configmap redis-queue-config -n payments --type merge -p '{"data": {"maxmemory": "512mb"}}'

# Done: the guard checks persistence, scope and convergence before it accepts. Its answer is this script's
# exit code (0 accepted, 1 sent back with feedback such as NOT_CONVERGED).
declare_repair_complete "raised the queue's memory cap at runtime and in its ConfigMap"
