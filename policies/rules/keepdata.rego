# Kept data: an incident that says "keep every message" or "orders must be kept" names those tables in a
# constraint of kind protected. Deleting rows from them loses what the incident told the agent to keep, even
# with a WHERE clause (SRE-DATA-004 covers the unscoped case everywhere). Repair rows in place instead.
package guardrail.rules.keepdata

import data.guardrail.lib

kept_table(t) if {
	t != ""
	some p in lib.protected_exact
	lower(p) == lower(t)
}

# A schema-qualified name (public.messages) is the same table.
kept_table(t) if {
	contains(t, ".")
	some p in lib.protected_exact
	lower(p) == lower(regex.replace(t, `^.*\.`, ""))
}

deny contains {
	"id": "SRE-DATA-009",
	"msg": sprintf("DELETE from %s removes rows this incident says to keep. Repair the rows in place (a scoped UPDATE inside a transaction) instead of deleting them.", [table]),
	"details": {"table": table},
} if {
	input.action.tool in {"psql", "mysql", "sql"}
	lib.verb == "delete"
	table := object.get(lib.details, "table", "")
	kept_table(table)
}
