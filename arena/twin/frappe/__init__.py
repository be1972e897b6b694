"""The Frappe/ERPNext substrate of the twin (Incident-Arena tasks 000-005).

Imported on demand by `arena.twin.engine.build_twin`; importing it registers `FrappeSubstrate` under "frappe".
Modules: substrate (wiring, request paths, programs), mariadb + sql (the server and the mysql client), redis +
rediscli (Bitnami Redis and redis-cli), rq (worker-long and the queue), helm (the release and `helm`), backlog
(005: the seeded Prepared Reports and emails, and the mail sink).
"""

from arena.twin.frappe.substrate import FrappeSpec, FrappeSubstrate

__all__ = ["FrappeSpec", "FrappeSubstrate"]
