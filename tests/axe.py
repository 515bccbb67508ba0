"""axe-core in the browser: find the installed axe.min.js and run it on a page.

scripts/install.sh --dev installs axe-core with npm into the venv ($venv/node/node_modules/axe-core);
MHA_VIZ_AXE names another axe.min.js.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

AXE_VERSION = "4.14.1"
SERIOUS = ("serious", "critical")
ALL = ("minor", "moderate", *SERIOUS)


def axe_path() -> Path | None:
    """The axe.min.js to inject: $MHA_VIZ_AXE, else the one scripts/install.sh --dev put in the venv; None if absent."""
    named = os.environ.get("MHA_VIZ_AXE")
    candidates = [Path(named)] if named else []
    candidates.append(Path(sys.prefix) / "node" / "node_modules" / "axe-core" / "axe.min.js")
    return next((p for p in candidates if p.is_file()), None)


def axe_violations(page, impacts: tuple[str, ...] = SERIOUS) -> list[dict]:
    """axe-core's WCAG 2.2 A/AA and best-practice violations on the page as it is now, of these impacts: id, impact,
    help and the nodes (CSS target and axe's failure summary). A disabled widget's label is checked too (the app
    keeps it readable: mha_viz/ui/style.py)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_path()))
    return page.evaluate(
        """async (impacts) => {
            const result = await axe.run(document, {runOnly: {type: 'tag', values:
                ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']}, resultTypes: ['violations']});
            return result.violations.filter(v => impacts.includes(v.impact)).map(v => ({id: v.id, impact: v.impact,
                help: v.help, nodes: v.nodes.map(n => ({target: n.target.join(' '), summary: n.failureSummary,
                html: n.html.slice(0, 160)}))}));
        }""",
        list(impacts),
    )


def summary(violations: list[dict]) -> str:
    """Violations as readable lines (for assertion messages and the audit script)."""
    return "\n".join(f"{v['impact']} {v['id']} ({len(v['nodes'])}): {v['help']}\n"
                     + "\n".join(f"    {n['target']}: {n['html']}\n      {n['summary']}" for n in v["nodes"][:6])
                     for v in violations)
