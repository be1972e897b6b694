package guardrail.rules.keepdata_test

import data.guardrail.rules.keepdata

ids(set) := {f.id | some f in set}

ctx := {"constraints": [{"id": "keep", "kind": "protected", "text": "keep every message", "targets": ["messages", "channel_seq"]}]}

sql(verb, table) := {"action": {"tool": "psql", "verb": verb, "mutating": true, "details": {"sql_kind": "dml", "table": table, "has_where": true}}, "context": ctx}

test_delete_from_kept_table_denied if "SRE-DATA-009" in ids(keepdata.deny) with input as sql("delete", "messages")

test_delete_from_schema_qualified_kept_table_denied if "SRE-DATA-009" in ids(keepdata.deny) with input as sql("delete", "public.messages")

test_update_of_kept_table_allowed if count(keepdata.deny) == 0 with input as sql("update", "messages")

test_delete_from_other_table_allowed if count(keepdata.deny) == 0 with input as sql("delete", "sessions")
