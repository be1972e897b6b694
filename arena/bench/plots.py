"""The bench report's plots, as SVG text (embedded in report.html; also written beside it).

Called by arena.bench.report with summary.json's figures. matplotlib runs headless (the Agg backend); each
function returns one SVG string, or None when there is nothing to draw.
"""

from __future__ import annotations

import io
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from arena.scenario import FAILURE_MODES  # noqa: E402

__all__ = ["pass_rate_per_task", "failure_modes_by_arm", "sensitivity_curve", "time_to_accept_histogram"]

ARM_COLOURS = {"guarded": "#2b7bb9", "unguarded": "#d1612e"}


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.find("<svg"):]


def pass_rate_per_task(summary: Mapping[str, Any]) -> str | None:
    per = summary.get("per_task", {})
    if not per:
        return None
    tasks = sorted(per)
    arms = [a for a in ("unguarded", "guarded") if a in summary["arms"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(tasks) + 2), 3.2))
    w = 0.8 / max(1, len(arms))
    for i, arm in enumerate(arms):
        ys = [per[t].get(arm, {}).get("pass_rate") or 0.0 for t in tasks]
        ax.bar([x + i * w for x in range(len(tasks))], ys, w, label=arm, color=ARM_COLOURS.get(arm))
    ax.set_xticks([x + w * (len(arms) - 1) / 2 for x in range(len(tasks))], tasks, rotation=60, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1")
    ax.set_title("Pass rate per task by arm")
    ax.legend(fontsize=8)
    return _svg(fig)


def failure_modes_by_arm(summary: Mapping[str, Any], paper_mix: Mapping[str, float]) -> str | None:
    arms = [a for a in ("unguarded", "guarded") if a in summary["arms"]]
    if not arms:
        return None
    cols = arms + ["paper"]
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    bottoms = [0.0] * len(cols)
    for m in FAILURE_MODES:
        vals = []
        for c in cols:
            if c == "paper":
                vals.append(paper_mix.get(m, 0.0))
            else:
                fm = summary["arms"][c]["failure_modes"]
                total = sum(fm.values())
                vals.append(100.0 * fm.get(m, 0) / total if total else 0.0)
        ax.bar(cols, vals, bottom=bottoms, label=m)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_ylabel("% of failed episodes")
    ax.set_title("Failure modes by arm (paper's mix beside)")
    ax.legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
    return _svg(fig)


def sensitivity_curve(summary: Mapping[str, Any]) -> str | None:
    sens = {x: v for x, v in summary.get("sensitivity", {}).items() if v and v.get("pass_rate") is not None}
    if not sens:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    points = sorted((float(x), v["pass_rate"], v.get("ci95") or [None, None]) for x, v in sens.items())
    ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o", color=ARM_COLOURS["guarded"])
    # Below MIN_CI_TASKS tasks a row has no interval (ci95 [None, None]): its point is drawn without error bars.
    bars = [(x, y, ci) for x, y, ci in points if None not in ci]
    if bars:
        ax.errorbar([x for x, _, _ in bars], [y for _, y, _ in bars],
                    yerr=[[max(0.0, y - ci[0]) for _, y, ci in bars], [max(0.0, ci[1] - y) for _, y, ci in bars]],
                    fmt="none", capsize=3, color=ARM_COLOURS["guarded"])
    un = summary["arms"].get("unguarded", {}).get("pass_rate")
    if un is not None:
        ax.axhline(un, ls="--", color=ARM_COLOURS["unguarded"], label="unguarded")
        ax.legend(fontsize=8)
    ax.set_xlabel("responsiveness to guard feedback")
    ax.set_ylabel("guarded pass@1")
    ax.set_ylim(0, 1.05)
    ax.set_title("Sensitivity to responsiveness" + ("" if len(bars) == len(points) else " (too few tasks for CIs)"))
    return _svg(fig)


def time_to_accept_histogram(summary: Mapping[str, Any]) -> str | None:
    tta = summary.get("cost", {}).get("time_to_accept_s", [])
    if not tta:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.hist(tta, bins=min(30, max(5, len(tta) // 4)), color=ARM_COLOURS["guarded"])
    ax.set_xlabel("virtual s from first declaration to acceptance")
    ax.set_ylabel("guarded episodes")
    ax.set_title("Time to accept")
    return _svg(fig)
