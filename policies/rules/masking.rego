# Restart masking: a runbook that says "do not restart or rescale pods to mask a fault" (a constraint of kind
# no_restart_masking) forbids the agent's own pod restarts. A restart clears in-memory faults (runtime events,
# leaked sessions, held locks) and the incident looks repaired until they recur. The guard's restart probe, which
# checks a repair after it is declared, is not an agent action and is unaffected.
package guardrail.rules.masking

import data.guardrail.lib
import data.guardrail.rules.restart

masking_constraints := lib.constraints_of("no_restart_masking")

deny contains {
	"id": "SRE-RESTART-005",
	"msg": sprintf("Restarting %s would clear the fault from memory and hide it, and this incident says: %q. Find what is wrong in the running service (its admin API, runtime events, config, the database) and repair it in place; the guard restarts it itself to check the repair after you declare.", [object.get({"": "this component"}, restart.component, restart.component), c.text]),
	"details": {"component": restart.component, "constraint": c.id},
} if {
	input.action.tool in {"kubectl", "systemctl", "service", "docker", "podman"}
	restart.is_restart
	some c in masking_constraints
}

# Scaling a workload down and up again is the same restart, however the replica count is written (kubectl scale,
# a patch, the chart's replicaCount in Helm values).
deny contains {
	"id": "SRE-RESTART-005",
	"msg": sprintf("Rescaling %s replaces its pods and clears the fault from memory, and this incident says: %q. Repair the fault in place instead.", [r.name, c.text]),
	"details": {"component": r.name, "constraint": c.id},
} if {
	input.action.mutating in {true, "unknown"}
	some r in lib.rescaled
	some c in masking_constraints
}
