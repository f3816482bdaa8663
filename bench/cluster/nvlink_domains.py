"""Nodes whose GPUs share a ClusterUUID and clique form one NVLink domain; a node whose GPUs disagree is named.

    from bench.cluster.nvlink_domains import group
    d = group({"tray01": report["fabric"], ...})    # each node's health report's "fabric" (fabric_state)
    d.domains        # {"9c6f5af3-.../4026": ["tray01", ..., "tray18"]}: two nodes or more each
    d.split          # {host: why}: its GPUs name different domains, or some a domain and others none
    d.alone          # {host: why}: its GPUs agree on a domain no other node names, where other nodes share one
    d.findings()     # {host: [finding]}: nvlink-domain-split (fail) and nvlink-domain-alone (warn)
    d.tree(base)     # a topology.Tree whose "leaf" of a domain's node is the domain (validate's pairing)

A GPU is in a domain where its fabric info says so (a ClusterUUID, or a
clique other than 0: the NVIDIA backend's fabric_state.GpuFabric.in_domain); a single-node
NVSwitch system (clique 0, zero ClusterUUID) and a GPU without fabric state
(N/A) are in none, and a node none of whose GPUs is in one is in no domain:
it is paired over its NICs as before, and is no finding. A GPU whose state
is not Completed is still counted by what it names: the fault is its own
finding (fabric-not-ready), drained alone.

A domain as a leaf: pairs inside it go over NVLink, pairs between domains
over the NICs; bench.validate's pairing and fabric judge read the Tree as
they read leaf switches. Their line inside a leaf is the NIC's published
figure, which NVLink passes: a tray slow inside its domain is not yet
judged against the domain's figure (the pair judge is bench.validate.looks').
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.cluster.findings import finding
from bench.cluster.topology import Tree

SOURCE = "nvlink-domain"
PREFIX = "nvlink:"   # a domain's name as a leaf: "nvlink:<ClusterUUID>/<clique>"


def key_of(gpu: dict) -> str | None:
    """The domain a GPU's fabric info names ("<ClusterUUID>/<clique>"), None where it names none."""
    uuid, clique = gpu.get("cluster_uuid"), gpu.get("clique_id")
    if uuid is None and not clique:
        return None
    return f"{uuid or 'no-cluster-uuid'}/{clique if clique is not None else '?'}"


def node_domain(fabric: list[dict]) -> tuple[str | None, str | None]:
    """(the domain every GPU of a node names, None) or (None, why its GPUs disagree); (None, None): in none."""
    named = {g.get("gpu_index"): key_of(g) for g in fabric}
    keys = set(named.values())
    if keys <= {None}:
        return None, None
    if len(keys) == 1:
        return keys.pop(), None
    by_key: dict[str | None, list] = {}
    for index, k in named.items():
        by_key.setdefault(k, []).append(index)
    said = "; ".join(f"GPU {', '.join(str(i) for i in idx)}: {k or 'no domain (clique 0, no ClusterUUID)'}"
                     for k, idx in sorted(by_key.items(), key=lambda kv: kv[1]))  # fmt: skip
    return None, f"its GPUs disagree on their NVLink domain: {said}"


@dataclass
class Domains:
    domains: dict[str, list[str]] = field(default_factory=dict)   # key -> its nodes (two or more), in order
    split: dict[str, str] = field(default_factory=dict)
    alone: dict[str, str] = field(default_factory=dict)
    of: dict[str, str] = field(default_factory=dict)              # node -> its domain's key (alone ones too)

    def findings(self) -> dict[str, list[dict]]:
        out = {h: [finding("nvlink-domain-split", SOURCE, why)] for h, why in self.split.items()}
        for h, why in self.alone.items():
            out.setdefault(h, []).append(finding("nvlink-domain-alone", SOURCE, why))
        return out

    def record(self) -> dict:
        return {"domains": {k: list(v) for k, v in self.domains.items()}, "split": dict(self.split),
                "alone": dict(self.alone)}

    def lines(self) -> list[str]:
        out = [f"NVLink domain {k}: {len(v)} node(s): {_some(v)}" for k, v in self.domains.items()]
        out += [f"NVLink domain: {h}: {why}" for h, why in {**self.split, **self.alone}.items()]
        return out

    def tree(self, base: Tree | None = None) -> Tree:
        """The topology with each domain's nodes on a leaf of their own (the domain), others as `base` has them."""
        leaf_of = dict(base.leaf_of) if base else {}
        for key, hosts in self.domains.items():
            for h in hosts:
                leaf_of[h] = PREFIX + key
        source = (f"{base.source} + " if base else "") + f"NVLink domains ({len(self.domains)})"
        return Tree(leaf_of=leaf_of, up=dict(base.up) if base else {}, source=source,
                    hcas=dict(base.hcas) if base else {})


def group(fabric_of: dict[str, list[dict]]) -> Domains:
    """The NVLink domains of these nodes, from each one's fabric info (a health report's "fabric")."""
    d = Domains()
    members: dict[str, list[str]] = {}
    for host, fabric in fabric_of.items():
        key, why = node_domain(fabric or [])
        if why:
            d.split[host] = why
        elif key:
            members.setdefault(key, []).append(host)
            d.of[host] = key
    d.domains = {k: hosts for k, hosts in members.items() if len(hosts) > 1}
    for key, hosts in members.items():
        if len(hosts) > 1 or not d.domains:   # one node's report alone (--health-from), or no domain of two: no
            continue                          # node of it can be told to be outside the others'

        (host,) = hosts
        uuid, clique = key.split("/")
        near = [f"{k} ({len(d.domains[k])} nodes)" for k in d.domains if uuid == k.split("/")[0] or
                clique == k.split("/")[1]]  # fmt: skip
        d.alone[host] = (f"its GPUs name NVLink domain {key} (ClusterUUID {uuid}, clique {clique}), which no other "
                         f"node of this run names: it reaches them over its NICs only"
                         + (f"; the domain(s) with its ClusterUUID or clique: {', '.join(near)}" if near else ""))
    return d


def _some(hosts: list[str], most: int = 6) -> str:
    return ", ".join(hosts[:most]) + (f" and {len(hosts) - most} more" if len(hosts) > most else "")
