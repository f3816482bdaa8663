"""Checks -> JUnit XML, so CI systems (Jenkins, GitLab, GitHub) show a validate run like a test run.

    xml_text = to_junit(checks, name="bench validate", duration_s=93.2)

One <testcase> per check per node (classname ``bench.validate.<check>``,
name ``<check> [<node>]``): FAIL is a <failure>, ERROR an <error> (could
not be measured), SKIP a <skipped>, WARN passes with its reason in
<system-out> (JUnit has no warning state).
Written with xml.etree, so reasons need no escaping by hand.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any


def to_junit(checks: Sequence[dict[str, Any]], name: str = "bench validate", duration_s: float = 0.0) -> str:
    """checks: dicts with check, node, status (PASS/WARN/FAIL/ERROR/SKIP), value, reference, reason."""
    failures = sum(1 for c in checks if c["status"] == "FAIL")
    errors = sum(1 for c in checks if c["status"] == "ERROR")
    skipped = sum(1 for c in checks if c["status"] == "SKIP")
    suites = ET.Element("testsuites", name=name, tests=str(len(checks)), failures=str(failures), errors=str(errors),
                        skipped=str(skipped), time=f"{duration_s:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(checks)), failures=str(failures),
                          errors=str(errors), skipped=str(skipped), time=f"{duration_s:.3f}")
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"bench.validate.{c['check']}",
                             name=f"{c['check']} [{c['node']}]", time=f"{c.get('duration_s') or 0.0:.3f}")
        detail = f"value: {c.get('value') or '-'}; reference: {c.get('reference') or '-'}; {c.get('reason') or ''}"
        if c["status"] == "FAIL":
            ET.SubElement(case, "failure", message=c.get("reason") or "FAIL", type="FAIL").text = detail
        elif c["status"] == "ERROR":
            ET.SubElement(case, "error", message=c.get("reason") or "ERROR", type="ERROR").text = detail
        elif c["status"] == "SKIP":
            ET.SubElement(case, "skipped", message=c.get("reason") or "skipped")
        elif c["status"] == "WARN":
            ET.SubElement(case, "system-out").text = f"WARN: {detail}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write(path: str, checks: Sequence[dict[str, Any]], name: str = "bench validate", duration_s: float = 0.0) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_junit(checks, name, duration_s))
