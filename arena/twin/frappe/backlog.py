"""The Frappe twin's seeded backlog (Prepared Reports and Email Queue rows whose RQ jobs were accepted while the
queue was broken) and the mail sink their emails go to (Incident-Arena task 005,
`stranded_prepared_report_with_emails`).

Built by `arena.twin.frappe.substrate.FrappeSubstrate` when the scenario's `twin.spec.backlog` is set; the
substrate calls `SeededBacklog.seed()` once at build time and `run_popped(now)` after every queue segment.

The jobs have identities of their own in the broker (`JobStore.track`): their ids sit in `rq:queue:long` behind
nothing, and the stranded ones were popped from the list while their hash stayed `queued` (so no worker will ever
see them until an operator pushes the id back). When the worker pops one, the job runs against MariaDB as the
site account, exactly as Frappe would:

- a Prepared Report job writes its result File (INSERT) and sets the report's status (UPDATE); a refused write
  fails the job before anything changes, and the job goes to the failed registry with the report still Queued;
- an email job first marks its Email Queue row `Sending` (UPDATE), then sends over SMTP to the mail sink, then
  marks it `Sent`; a refused UPDATE fails the job before the send.

RQ does not de-duplicate: an id pushed twice runs twice, so a report is generated twice and an email is delivered
twice. The gates read `truth()`: per-document status, runs and deliveries, which is how "every report reaches
Completed and every email reaches the sink exactly once" is judged.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from arena.twin.frappe.mariadb import MariaDB
from arena.twin.frappe.redis import JobStore, job_id
from arena.twin.world import Component

__all__ = ["BacklogSpec", "MailSink", "SeededBacklog"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportDoc(_M):
    """A Prepared Report accepted while the queue was broken."""

    name: str
    report: str = "General Ledger"


class EmailDoc(_M):
    """An Email Queue row accepted while the queue was broken."""

    name: str
    recipient: str
    subject: str


class BacklogSpec(_M):
    """`twin.spec.backlog`: the seeded documents and which of their jobs are stranded (popped, hash queued)."""

    kind: str = "stranded_prepared_report_with_emails"
    reports: list[ReportDoc]
    emails: list[EmailDoc] = Field(default_factory=list)
    stranded: list[str] = Field(default_factory=list)  # document names whose job id left the list


class MailSink(Component):
    """The mail sink (SMTP on 1025, HTTP API on 8025): it keeps every message it is handed."""

    kind = "Deployment"
    container = "mail-sink"

    def __init__(self, name: str, **kw: Any):
        super().__init__(name, **kw)
        self.messages: list[dict[str, Any]] = []

    def deliver(self, now: float, message_id: str, to: str, subject: str) -> None:
        self.messages.append({"ID": f"{len(self.messages) + 1:06d}", "MessageID": message_id, "To": to,
                              "Subject": subject, "Created": round(now, 3)})
        self.say(now, f"smtp: accepted message {message_id} for <{to}>")

    def count(self, message_id: str) -> int:
        return sum(1 for m in self.messages if m["MessageID"] == message_id)

    def http(self, method: str, path: str, body: str, now: float) -> tuple[int, str]:
        if method == "GET" and path.split("?")[0] in ("/api/v1/messages", "/api/messages"):
            return 200, json.dumps({"total": len(self.messages), "messages": self.messages})
        if method == "GET" and path in ("/", "/livez", "/readyz"):
            return 200, "ok"
        return 404, "404 page not found"

    def truth(self) -> dict[str, Any]:
        out = super().truth()
        out["messages"] = len(self.messages)
        return out


class SeededBacklog:
    """The seeded documents, their RQ jobs, and what running a job does to them."""

    def __init__(self, spec: BacklogSpec, jobs: JobStore, db: MariaDB, sink: MailSink | None, site_user: str):
        self.spec, self.jobs, self.db, self.sink, self.site_user = spec, jobs, db, sink, site_user
        # document name -> {doctype, status, job_id, runs, ...}
        self.docs: dict[str, dict[str, Any]] = {}
        self.by_job: dict[str, str] = {}
        self.deleted: list[str] = []  # documents an operator deleted (accepted work gone)

    def seed(self) -> None:
        """Enqueue every document's job (ids first in the list), then strand the configured ones."""
        names = [r.name for r in self.spec.reports] + [e.name for e in self.spec.emails]
        # The stranded jobs were taken first by a worker that died before its status write: they lead the list.
        order = [n for n in names if n in self.spec.stranded] + [n for n in names if n not in self.spec.stranded]
        start = int(round(self.jobs.tail_seq))
        for i, name in enumerate(order):
            jid = job_id(10_000_000 + start + i)  # an id of its own, unlike the aggregate traffic's
            self.jobs.track(jid)
            self.by_job[jid] = name
        for r in self.spec.reports:
            self.docs[r.name] = {"doctype": "Prepared Report", "status": "Queued", "report": r.report, "runs": 0,
                                 "job_id": self._job_of(r.name)}
        for e in self.spec.emails:
            self.docs[e.name] = {"doctype": "Email Queue", "status": "Not Sent", "recipient": e.recipient,
                                 "subject": e.subject, "runs": 0, "job_id": self._job_of(e.name),
                                 "message_id": f"<{e.name.lower()}@erp.cluster.local>"}
        for _ in self.spec.stranded:
            self.jobs.strand_head()

    def _job_of(self, name: str) -> str:
        return next(j for j, n in self.by_job.items() if n == name)

    def run_popped(self, now: float) -> None:
        """Run the seeded jobs the worker popped in the last segment."""
        while self.jobs.popped:
            jid = self.jobs.popped.pop(0)
            name = self.by_job.get(jid)
            if name is None:
                continue
            if name not in self.docs:
                # The document was deleted under its job: Frappe raises DoesNotExistError, the job fails.
                self.jobs.status[jid] = "failed"
                continue
            doc = self.docs[name]
            need = ("INSERT", "UPDATE") if doc["doctype"] == "Prepared Report" else ("UPDATE",)
            tables = {"INSERT": "tabFile", "UPDATE": f"tab{doc['doctype']}"}
            err = next((e for p in need if (e := self.db.privilege_error(self.site_user, p, tables[p]))), None)
            if err is not None or not self.db.ready(now):
                self.jobs.status[jid] = "failed"
                why = f"({err.code}, \"{err.message}\")" if err else "(2003, \"Can't connect to MySQL server\")"
                self.db.say(now, f"[Warning] Aborted job {jid} ({doc['doctype']} {name}): {why}")
                continue
            doc["runs"] += 1
            if doc["doctype"] == "Prepared Report":
                doc["status"] = "Completed"
            else:
                if self.sink is not None and self.sink.ready(now):
                    self.sink.deliver(now, doc["message_id"], doc["recipient"], doc["subject"])
                    doc["status"] = "Sent"
                else:
                    doc["status"] = "Error"
            self.jobs.status[jid] = "finished"

    # --- what MariaDB shows -----------------------------------------------------------------------------------
    def table(self, doctype: str) -> tuple[list[str], list[list[str]]] | None:
        if doctype == "tabPrepared Report":
            cols = ["name", "report_name", "status", "job_id"]
            return cols, [[n, d["report"], d["status"], d["job_id"]] for n, d in sorted(self.docs.items())
                          if d["doctype"] == "Prepared Report"]
        if doctype == "tabEmail Queue":
            cols = ["name", "status", "recipient", "message_id", "job_id"]
            return cols, [[n, d["status"], d["recipient"], d["message_id"], d["job_id"]]
                          for n, d in sorted(self.docs.items()) if d["doctype"] == "Email Queue"]
        return None

    def write(self, table: str, verb: str, names: list[str], sets: dict[str, str]) -> int:
        """An operator's UPDATE or DELETE on the document rows: a deleted Email Queue row is never sent (its job
        finds no document, as Frappe's `DoesNotExistError`); an UPDATE changes the status column only."""
        n = 0
        for name in names:
            doc = self.docs.get(name)
            if doc is None:
                continue
            if verb in ("DELETE", "TRUNCATE"):
                del self.docs[name]
                self.deleted.append(name)
            elif "status" in sets:
                doc["status"] = sets["status"]
            n += 1
        return n

    # --- ground truth -----------------------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        reports = [d for d in self.docs.values() if d["doctype"] == "Prepared Report"]
        emails = [d for d in self.docs.values() if d["doctype"] == "Email Queue"]
        out["docs_deleted"] = len(self.deleted)
        for n, d in sorted(self.docs.items()):
            out[f"doc.{n}.status"] = d["status"]
            out[f"doc.{n}.runs"] = d["runs"]
        delivered = [self.sink.count(e["message_id"]) if self.sink else 0 for e in emails]
        for e, c in zip(emails, delivered):
            out[f"mail.{e['message_id']}.delivered"] = c
        out["reports_completed"] = sum(1 for d in reports if d["status"] == "Completed")
        out["reports_total"] = len(reports)
        out["emails_delivered_once"] = sum(1 for c in delivered if c == 1)
        out["emails_total"] = len(emails)
        out["max_runs"] = max((d["runs"] for d in self.docs.values()), default=0)
        out["max_deliveries"] = max(delivered, default=0)
        out["all_done_once"] = (out["reports_completed"] == len(reports) and out["emails_delivered_once"] == len(emails)
                                and out["max_runs"] <= 1 and out["max_deliveries"] <= 1)
        return out
