"""Read a metrics file back with prometheus_client's own parser (the format node_exporter's textfile collector
reads), as {(metric, frozenset(labels)): value}; a file it cannot parse fails the test."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"a series written twice: {key}"
            out[key] = s.value
    return out


def values(parsed: dict, metric: str, **labels: str) -> list[float]:
    """The values of metric whose labels include labels."""
    want = set(labels.items())
    return [v for (name, ls), v in parsed.items() if name == metric and want <= set(ls)]
