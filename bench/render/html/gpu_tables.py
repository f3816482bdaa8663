"""Every GPU against its peers as a table, where a cluster has too few GPUs for a picture to say more than the numbers.

    rows = gpu_table(rec)       # [{"gpu", "images_per_s", "vs_median", "status", "line"}], slowest first
    rows = copies_table(rec)    # [{"gpu", "kinds": {kind: GB/s}, "status"}]

Below PICTURE_MIN GPUs the page shows these (a dozen dots are better read
as a dozen numbers) and imports no matplotlib: a small validate, as most of
the suite's are, writes its page in a fraction of a second. The lines are
the record's (measured.gpu_lines); the status is each GPU's row.
"""

from __future__ import annotations

from typing import Any

PICTURE_MIN = 16  # GPUs with a figure: from here on a picture, below it a table


def figures(rec: dict[str, Any]) -> dict[str, float]:
    got = (rec.get("measured") or {}).get("gpu_images_per_s") or {}
    return {k: v for k, v in got.items() if isinstance(v, (int, float))}


def _status(rec: dict[str, Any], check: str) -> dict[str, str]:
    return {c["node"]: c["status"] for c in rec.get("checks") or [] if c["check"] == check and c.get("gpu") is not None}


def gpu_table(rec: dict[str, Any]) -> list[dict[str, Any]]:
    measured = rec.get("measured") or {}
    lines = {m: x for m, x in (measured.get("gpu_lines") or {}).items() if x}
    model_of = measured.get("gpu_model") or {}
    status = _status(rec, "throughput")
    out = []
    for gpu, x in sorted(figures(rec).items(), key=lambda kv: kv[1]):
        model = model_of.get(gpu.rsplit(":", 1)[0]) if len(lines) > 1 else next(iter(lines), None)
        ln = lines.get(model) if model is not None else None
        out.append({"gpu": gpu, "images_per_s": x, "vs_median": x / ln["median"] - 1 if ln else None,
                    "status": status.get(gpu, "SKIP"),
                    "line": (f"median {ln['median']:,.1f} img/s; WARN below -{ln['noise']:.0%}, FAIL below "
                             f"-{ln['fail']:.0%}") if ln else "no peer lines"})
    return out


def copies_table(rec: dict[str, Any]) -> list[dict[str, Any]]:
    per_gpu = (rec.get("measured") or {}).get("copies") or {}
    status = {"copies": _status(rec, "copies"), "memory": _status(rec, "memory")}
    out = []
    for gpu, x in per_gpu.items():
        kinds = {k: v for k, v in (((x or {}).get("phases") or {}).get("alone") or {}).items()
                 if isinstance(v, (int, float))}
        if kinds:
            out.append({"gpu": gpu, "kinds": kinds, "status": status["copies"].get(gpu, "SKIP"),
                        "memory": status["memory"].get(gpu, "SKIP")})
    return out
