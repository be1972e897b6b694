"""The bench report: report.md and report.html from summary.json, in the issue's order.

Called by `guardrail bench` (arena/cli.py) after arena.bench.stats has summarised the run. Sections: 1 Detection
(no behavioural assumption), 2 A/B pass@1, 3 Failure modes by arm beside the paper, 4 Sensitivity to
responsiveness, 5 Cost, 6 Per-task table. Both files come from one list of sections (title, prose and tables in
reading order, plots), so they cannot disagree; the HTML embeds the plots as inline SVG.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from arena.bench import plots
from guardrail.fileio import write_atomic
from arena.bench.stats import MIN_CI_TASKS, PAPER_MIX, RECALL_MODES
from arena.scenario import FAILURE_MODES

__all__ = ["SECTION_TITLES", "build_sections", "write_report"]

SECTION_TITLES = ("1. Detection", "2. A/B pass@1", "3. Failure modes by arm", "4. Sensitivity to responsiveness",
                  "5. Cost", "6. Per-task table")


@dataclass
class Section:
    """One report section: prose and tables in reading order, then plots (name, SVG)."""

    title: str
    blocks: list[str | tuple[list[str], list[list[str]]]] = field(default_factory=list)
    plots: list[tuple[str, str]] = field(default_factory=list)

    def say(self, text: str) -> None:
        self.blocks.append(text)

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.blocks.append((header, rows))


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(ci: Any) -> str:
    if not ci or ci[0] is None:
        return "n/a"  # no episodes, or fewer than MIN_CI_TASKS tasks
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _diff(d: Mapping[str, Any]) -> str:
    if d["diff"] is None:
        return "n/a (no task ran in both arms)"
    return f"{100 * d['diff']:+.1f} pp {_ci(d['ci95'])} over {d['tasks']} task{'s' if d['tasks'] != 1 else ''}"


def _num(x: Any, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def build_sections(s: Mapping[str, Any]) -> list[Section]:
    det = s["detection"]
    out: list[Section] = []

    d = Section(SECTION_TITLES[0])
    if not det["scripts"]:
        d.say("Skipped: no solution script was replayed (--no-detection).")
        out.append(d)
    else:
        _detection_section(d, det)
        out.append(d)
    _ab_and_rest(s, out)
    return out


def _detection_section(d: Section, det: Mapping[str, Any]) -> None:
    d.say(
        f"Every solution script of every task replayed once (seed 0) in the guarded arm: {det['scripts']} scripts, "
        f"{det['valid_scripts']} of them valid. A bad script is **caught** when its guarded episode had a policy "
        "denial or a rejected declaration before any accepted declaration (a script stops at an accepted "
        "declaration, so every denial or rejection it met came first). A premature declaration is also caught when "
        "the guard held it through at least one load cycle (or a segment after the last change, before the first full "
        "cycle) that ended out of band after the declaration: holding "
        "the declaration until the SLIs converge is how the guard answers that failure mode without rejecting it. "
        "A valid script is **falsely rejected** when "
        "its guarded episode fails, or its last declaration was never accepted (held, never resolved). "
        "These figures assume nothing about how an agent responds to feedback. The `passed guarded anyway` column "
        "counts bad scripts whose guarded episode passed.")
    rows = []
    for m in FAILURE_MODES:
        b = det["by_mode"][m]
        target = " (target >= 95%)" if m in RECALL_MODES else ""
        rows.append([m, str(b["scripts"]), str(b["caught"]), _pct(b["recall"]) + target, str(b["guarded_passed"]),
                     ", ".join(f"{k} {v}" for k, v in sorted(b["feedback"].items())) or "-",
                     ", ".join(b["missed"]) or "-"])
    d.table(["failure mode", "bad scripts", "caught", "recall", "passed guarded anyway", "feedback codes", "missed"],
            rows)
    d.say(
        f"False rejections: {det['false_rejections']} of {det['valid_scripts']} valid scripts "
        f"({_pct(det['false_rejection_rate'])}; target <= 2%): {', '.join(det['false_rejected']) or 'none'}. "
        f"Feedback on valid scripts: {', '.join(f'{k} {v}' for k, v in sorted(det['valid_feedback'].items())) or 'none'}.")


def _ab_and_rest(s: Mapping[str, Any], out: list[Section]) -> None:
    ab = Section(SECTION_TITLES[1])
    ab.say(
        f"Agents: {', '.join(s['agents'])}. Paired arms: the same scenario, seed and agent in both; only the guard "
        "differs. 95% CIs from a task-level bootstrap (tasks resampled with all their episodes, percentile, "
        f"4,000 resamples, seeded); n/a below {MIN_CI_TASKS} tasks, and a rate of 0% or 100% on every task is "
        "bounded by the rule of three (3/tasks). A full-fix episode ran every mutating command of the task's "
        "reference script.")
    rows = []
    for arm, a in s["arms"].items():
        rows.append([arm, str(a["episodes"]), _pct(a["pass_rate"]), _ci(a["ci95"]),
                     f"{a['full_fix_episodes']} ({_pct(a['full_fix_share'])})", _pct(a["full_fix_pass_rate"]),
                     _ci(a["full_fix_ci95"])])
    ab.table(["arm", "episodes", "pass@1", "95% CI", "full-fix episodes", "full-fix pass@1", "95% CI"], rows)
    if "difference" in s:
        dp, df = s["difference"]["pass_rate"], s["difference"]["full_fix_pass_rate"]
        ab.say(f"Guarded minus unguarded: pass@1 {_diff(dp)}; full-fix pass@1 {_diff(df)}.")
    if s.get("by_agent"):
        ab.say("The rows above pool every agent; each agent alone:")
        ab.table(["agent", "arm", "episodes", "pass@1", "95% CI", "full-fix pass@1"],
                 [[agent, arm, str(a["episodes"]), _pct(a["pass_rate"]), _ci(a["ci95"]), _pct(a["full_fix_pass_rate"])]
                  for agent, by_arm in s["by_agent"].items() for arm, a in by_arm.items()])
    if s.get("calibration"):
        rows = [[k, _num(v["bench"]), _num(v["paper"]),
                 "-" if v["within_4pp"] is None else ("yes" if v["within_4pp"] else "MISSED")]
                for k, v in s["calibration"].items()]
        ab.say("Calibration: the calibrated agent's unguarded arm beside the paper (percent; target within 4 pp; "
               f"no verdict below {MIN_CI_TASKS} tasks).")
        ab.table(["figure", "bench", "paper", "within 4 pp"], rows)
    ab.plots.append(("pass_rate_per_task", plots.pass_rate_per_task(s) or ""))
    out.append(ab)

    fm = Section(SECTION_TITLES[2])
    arms = list(s["arms"])
    rows = []
    totals = {arm: sum(s["arms"][arm]["failure_modes"].values()) for arm in arms}
    for m in FAILURE_MODES:
        row = [m]
        for arm in arms:
            n = s["arms"][arm]["failure_modes"][m]
            row.append(f"{n} ({_pct(n / totals[arm]) if totals[arm] else '-'})")
        row.append(f"{PAPER_MIX[m]:.1f}%" if m in PAPER_MIX else "-")
        rows.append(row)
    fm.table(["failure mode"] + arms + ["paper"], rows)
    fm.plots.append(("failure_modes_by_arm", plots.failure_modes_by_arm(s, PAPER_MIX) or ""))
    out.append(fm)

    se = Section(SECTION_TITLES[3])
    if s["sensitivity"]:
        se.say("The guarded arm rerun with the agent's responsiveness (the probability that it acts correctly on "
               "each guard feedback code) set to each value; same tasks and seeds. Acting correctly on a repair "
               "code (NOT_DURABLE, RESTART_REGRESSION, RESIDUAL_CAUSE, SCOPE_DENIED, SCOPE_DRIFT) means making the "
               "reference fix's changes still missing: the persona knows the fix once told that something is "
               "wrong, which the feedback does not itself say. Responsiveness 0 assumes nothing: the agent never "
               "acts on feedback, and the guard's holds, denials and rejections are all that differ from the "
               "unguarded arm. The last row always acts but knows only what the feedback says: it makes the "
               "missing changes of the keys a message names (a NOT_DURABLE key, a denied one), no others.")
        ordered = sorted(s["sensitivity"].items(), key=lambda kv: float(kv[0]))
        se.table(["responsiveness", "episodes", "guarded pass@1", "95% CI", "full-fix pass@1"],
                 [[k, str(v["episodes"]), _pct(v["pass_rate"]), _ci(v["ci95"]), _pct(v["full_fix_pass_rate"])]
                  for k, v in ordered]
                 + [["1.0, knowing only what the feedback names", str(v["episodes"]), _pct(v["pass_rate"]),
                     _ci(v["ci95"]), _pct(v["full_fix_pass_rate"])]
                    for v in [s.get("sensitivity_feedback_only")] if v])
        se.plots.append(("sensitivity", plots.sensitivity_curve(s) or ""))
    elif not s.get("responsiveness", True):
        se.say("Skipped: no responsiveness was asked for (--responsiveness '').")
    else:
        se.say("No sensitivity runs: " + ("; ".join(s.get("notes", [])) or
                             "no agent in this run takes a responsiveness (replay agents do not respond)."))
    out.append(se)

    c = s["cost"]
    co = Section(SECTION_TITLES[4])
    co.table(["figure", "value"], [
        ["paired episodes", str(c["pairs"])],
        ["extra steps (guarded - unguarded, mean)", _num(c["extra_steps_mean"], "{:+.2f}")],
        ["extra virtual s before acceptance (mean / median, pairs where both declared)",
         f"{_num(c['extra_virtual_s_before_acceptance_mean'])} / "
         f"{_num(c['extra_virtual_s_before_acceptance_median'])} (n={c['pairs_both_declared']})"],
        ["time to accept, median virtual s (first declaration -> acceptance)", _num(c["time_to_accept_s_median"])],
        ["restart probes run (total / per guarded episode)",
         f"{c['restart_probes_total']} / {_num(c['restart_probes_per_guarded_episode'], '{:.2f}')}"],
        ["wall s per episode (guarded / unguarded)",
         f"{_num(c['wall_s_per_episode'].get('guarded'), '{:.3f}')} / "
         f"{_num(c['wall_s_per_episode'].get('unguarded'), '{:.3f}')}"],
        ["bench wall s (all episodes, this invocation)", _num(s["wall_s"])],
    ])
    co.plots.append(("time_to_accept", plots.time_to_accept_histogram(s) or ""))
    out.append(co)

    pt = Section(SECTION_TITLES[5])
    rows = []
    for t, per in sorted(s["per_task"].items()):
        row = [t]
        for arm in arms:
            a = per.get(arm, {})
            row.append(f"{_pct(a.get('pass_rate'))} ({a.get('episodes', 0)})")
            row.append(str(a.get("full_fix", 0)))
            row.append(", ".join(f"{k} {v}" for k, v in sorted(a.get("failure_modes", {}).items())) or "-")
        rows.append(row)
    header = ["task"] + [h for arm in arms for h in (f"{arm} pass@1 (n)", f"{arm} full-fix", f"{arm} failures")]
    pt.table(header, rows)
    out.append(pt)


def _build(s: Mapping[str, Any]) -> str:
    return f", build {s['build']}" if s.get("build") else ""


def _md(sections: list[Section], s: Mapping[str, Any]) -> str:
    lines = ["# guardrail bench report", "",
             f"{s['episodes']} episodes, {s['wall_s']:.1f} s wall{_build(s)}. Figures are also in summary.json.", ""]
    for sec in sections:
        lines += [f"## {sec.title}", ""]
        for b in sec.blocks:
            if isinstance(b, str):
                lines += [b, ""]
                continue
            header, rows = b
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(r) + " |" for r in rows]
            lines.append("")
        for name, svg in sec.plots:
            if svg:
                lines += [f"![{name}](plots/{name}.svg)", ""]
    return "\n".join(lines)


def _inline(text: str) -> str:
    out = html.escape(text)
    parts = out.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def _html(sections: list[Section], s: Mapping[str, Any]) -> str:
    body = [f"<h1>guardrail bench report</h1><p>{s['episodes']} episodes, {s['wall_s']:.1f} s wall"
            f"{html.escape(_build(s))}.</p>"]
    for sec in sections:
        body.append(f"<h2>{html.escape(sec.title)}</h2>")
        for b in sec.blocks:
            if isinstance(b, str):
                body.append(f"<p>{_inline(b)}</p>")
                continue
            header, rows = b
            body.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows]
            body.append("</table>")
        body += [f'<div class="plot" id="{name}">{svg}</div>' for name, svg in sec.plots if svg]
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}.plot{margin:1em 0}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>guardrail bench</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def write_report(summary: Mapping[str, Any], out: Path) -> tuple[Path, Path]:
    """Write report.md, report.html and plots/*.svg under `out`, each replaced whole in one rename (an interrupted
    write leaves the previous file, never a part of the new one)."""
    sections = build_sections(summary)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for sec in sections:
        for name, svg in sec.plots:
            if svg:
                write_atomic(out / "plots" / f"{name}.svg", svg)
    md, ht = out / "report.md", out / "report.html"
    write_atomic(md, _md(sections, summary))
    write_atomic(ht, _html(sections, summary))
    return md, ht
