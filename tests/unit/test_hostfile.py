"""bench.cluster.hostfile against DeepSpeed's own launcher functions, and its refusals.

Agreement: the same inputs go through deepspeed.launcher.runner (the version
installed, 0.19.8) and through bench.cluster.hostfile, and the outputs must be equal,
order included. Where bench deliberately differs (unsafe, crashing or silent
behaviour in DeepSpeed), a test pins DeepSpeed's behaviour next to ours, so a
DeepSpeed upgrade that changes it shows up here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU here; silences DeepSpeed's warning
from deepspeed.launcher import runner as dsrun  # noqa: E402

from bench.core.errors import BadInput  # noqa: E402
from bench.cli import Parser  # noqa: E402
from bench.cluster.hostfile import HostSelection, parse_hostfile, parse_hostfile_text, resolve_resources  # noqa: E402
from bench.cluster.hostnames import validate_hostname  # noqa: E402
from bench.core.options import add_options, from_args  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROXY_LINE = "-oProxyCommand=touch${IFS}marker slots=1"


def ds_resolve(pool: dict[str, int], include="", exclude="", num_nodes=-1, num_gpus=-1):
    """DeepSpeed main()'s path from resource pool to active resources, minus ssh."""
    active = dsrun.parse_inclusion_exclusion(pool, include, exclude)
    return dsrun.apply_num_nodes_and_gpus(active, num_nodes, num_gpus)


def items(d):
    return [(k, list(v) if isinstance(v, list) else v) for k, v in d.items()]


# --- hostfile text: agreement --------------------------------------------------

GOOD_HOSTFILES = {
    # DeepSpeed's own tests/unit/launcher/test_run.py::test_hostfile_good text
    "deepspeed-good": """
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    """,
    "two-workers": "worker-0 slots=4\nworker-1 slots=4\n",
    "trailing-comments": "node-b slots=2   # rtx 3070\nnode-a slots=1 #p4\n",
    "tabs-crlf": "gpu01\tslots=8\r\ngpu02 \t slots=8\r\n",
    "underscore-fqdn-ipv6": "node_01.cluster.example.org slots=1\nfe80::1 slots=2\n10.0.0.7 slots=1\n",
    "no-final-newline": "single slots=3",
}


@pytest.mark.parametrize("name", GOOD_HOSTFILES)
def test_parse_agrees_with_deepspeed(name):
    text = GOOD_HOSTFILES[name]
    ours = parse_hostfile_text(text, name)
    theirs = dsrun._parse_hostfile(text.splitlines())
    assert items(ours) == items(theirs)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("localhost", {"localhost": 2}),
        ("tesla", {f"tesla-node{i}": 1 for i in range(1, 6)}),
        ("nebula", {"nebula-gpu01": 2}),
        ("vector", {f"vector-t4-0{i}": 8 for i in range(1, 5)}),
    ],
)
def test_shipped_hostfiles(name, expected):
    path = str(REPO / "hostfiles" / name)
    ours = parse_hostfile(path)
    assert items(ours) == items(expected)
    assert items(ours) == items(dsrun.fetch_hostfile(path))


def test_utf8_bom_is_ignored(tmp_path):
    hf = tmp_path / "hf"
    hf.write_bytes(b"\xef\xbb\xbfnode1 slots=2\n")
    assert parse_hostfile(str(hf)) == {"node1": 2}


# --- include / exclude / num_nodes / num_gpus: agreement -----------------------

W2 = {"worker-0": 4, "worker-1": 4}
W3 = {"c": 2, "a": 4, "b": 1}  # hostfile order is not sorted order

AGREE = [
    (W2, "", ""),
    (W2, "worker-0@worker-1:0,2", ""),  # DeepSpeed's documented --include example
    (W2, "worker-1:0,3", ""),
    (W2, "worker-0:1,1", ""),
    (W2, "worker-0:1@worker-0:0,1", ""),
    (W2, "worker-1@worker-0", ""),  # result keeps hostfile order, not spec order
    (W2, "worker-0:3,0", ""),
    (W2, "", "worker-1"),  # a whole host
    (W2, "", "worker-1:0"),  # DeepSpeed's documented --exclude example
    (W2, "", "worker-0:0,1@worker-1:3"),
    (W2, "", "worker-0:3@worker-0:3"),
    (W2, "", "worker-0:0,1,2,3"),  # all slots of one host drop the host
    (W3, "b@c:1", ""),
    (W3, "", "a:1,2"),
    ({"10.0.0.1": 2, "node_1": 2}, "10.0.0.1:1@node_1", ""),
]


@pytest.mark.parametrize("pool, include, exclude", AGREE)
def test_filters_agree_with_deepspeed(pool, include, exclude):
    ours = resolve_resources(pool, include=include, exclude=exclude)
    assert items(ours) == items(ds_resolve(pool, include, exclude))


@pytest.mark.parametrize(
    "pool, num_nodes, num_gpus",
    [(W3, 1, -1), (W3, 2, -1), (W3, 3, -1), (W2, -1, 1), (W2, -1, 4), (W2, 1, 2), (W3, 2, 1)],
)
def test_num_nodes_and_gpus_agree_with_deepspeed(pool, num_nodes, num_gpus):
    ours = resolve_resources(pool, num_nodes=num_nodes, num_gpus=num_gpus)
    assert items(ours) == items(ds_resolve(pool, num_nodes=num_nodes, num_gpus=num_gpus))


@pytest.mark.parametrize(
    "include, exclude, option",
    [
        ("jeff", "", "--include"),
        ("", "jeff", "--exclude"),
        ("worker-1:4", "", "--include"),
        ("", "worker-1:4", "--exclude"),
        ("", "worker-1@worker-0:1@5", "--exclude"),  # from DeepSpeed's test_parser_errors
        ("worker-0:a", "", "--include"),
        ("worker-0:", "", "--include"),
        ("worker-0@", "", "--include"),
        ("A", "B", "--exclude"),
    ],
)
def test_both_refuse(include, exclude, option):
    with pytest.raises(ValueError):
        ds_resolve(W2, include, exclude)
    with pytest.raises(BadInput) as e:
        resolve_resources(W2, include=include, exclude=exclude)
    assert str(e.value).startswith(option + ": ")


# --- where bench differs from DeepSpeed on purpose -----------------------------


def test_proxycommand_host_is_refused():
    # DeepSpeed takes it as a host, and `ssh <host> hostname` then runs the command.
    assert list(dsrun._parse_hostfile([PROXY_LINE])) == ["-oProxyCommand=touch${IFS}marker"]
    with pytest.raises(BadInput) as e:
        parse_hostfile_text(f"node1 slots=1\n{PROXY_LINE}\n", "hostfiles/evil")
    msg = str(e.value)
    assert msg.startswith("hostfiles/evil:2: bad host name '-oProxyCommand=touch${IFS}marker': ")
    assert "starts with '-'" in msg


def test_proxycommand_in_spec_is_refused():
    with pytest.raises(BadInput, match=r"^--exclude: bad host name '-oProxyCommand"):
        resolve_resources(W2, exclude="-oProxyCommand=touch${IFS}marker")


@pytest.mark.parametrize(
    "line, ds_slots",
    [("n slots=0", 0), ("n slots=4x", 4), ("n slots=2 max_slots=4", 2), ("n slots=2 extra words", 2)],
)
def test_sloppy_lines_deepspeed_accepts_are_refused(line, ds_slots):
    assert dsrun._parse_hostfile([line]) == {"n": ds_slots}
    with pytest.raises(BadInput, match=r"^hf:1: "):
        parse_hostfile_text(line, "hf")


def test_duplicates_differing_in_case_are_refused():
    assert list(dsrun._parse_hostfile(["Node1 slots=1", "node1 slots=1"])) == ["Node1", "node1"]
    with pytest.raises(BadInput, match=r"^hf:2: duplicate host 'node1' \(first as 'Node1' on line 1\)"):
        parse_hostfile_text("Node1 slots=1\nnode1 slots=1\n", "hf")


def test_num_gpus_past_slots_is_refused():
    # DeepSpeed hands out GPU ids the host does not have.
    assert ds_resolve({"a": 1, "b": 1}, num_gpus=2) == {"a": [0, 1], "b": [0, 1]}
    with pytest.raises(BadInput, match=r"^--gpus: 2 asked but host 'a' has 1 slot"):
        resolve_resources({"a": 1, "b": 1}, num_gpus=2)


def test_num_nodes_past_hostfile_is_refused():
    assert list(ds_resolve(W2, num_nodes=3)) == ["worker-0", "worker-1"]
    with pytest.raises(BadInput, match=r"^--num-nodes: 3 asked but the hostfile lists 2"):
        resolve_resources(W2, num_nodes=3)


def test_excluding_everything_is_refused():
    assert ds_resolve(W2, exclude="worker-0@worker-1") == {}
    with pytest.raises(BadInput, match=r"^--exclude: leaves no slots"):
        resolve_resources(W2, exclude="worker-0@worker-1")


def test_whole_and_slots_of_one_host_is_refused():
    # DeepSpeed concatenates: "worker-0@worker-0:1" silently means slot 1 only.
    assert ds_resolve(W2, include="worker-0@worker-0:1") == {"worker-0": [1]}
    with pytest.raises(BadInput, match=r"^--include: host 'worker-0' is named both whole and with slots"):
        resolve_resources(W2, include="worker-0@worker-0:1")


def test_ipv6_hosts_in_specs():
    pool = {"fe80::1": 2, "fe80::2": 2}
    with pytest.raises(ValueError):  # DeepSpeed's split(':') cannot take an IPv6 host
        ds_resolve(pool, include="fe80::1")
    assert resolve_resources(pool, include="[fe80::1]") == {"fe80::1": [0, 1]}
    assert resolve_resources(pool, exclude="[fe80::1]:0") == {"fe80::1": [1], "fe80::2": [0, 1]}
    with pytest.raises(BadInput, match=r"^--include: write the IPv6 host .* as \[address\]"):
        resolve_resources(pool, include="fe80::1")


def test_missing_hostfile_is_refused(tmp_path):
    missing = str(tmp_path / "nope")
    assert dsrun.fetch_hostfile(missing) is None  # DeepSpeed falls back to localhost
    with pytest.raises(BadInput) as e:
        parse_hostfile(missing)
    assert str(e.value) == f"--hostfile: no such file {missing!r}"


# --- malformed hostfiles ---------------------------------------------------------

BAD_LINES = [
    ("a slots=1\nb slots=2\na slots=3\n", 3, "duplicate host 'a' (first as 'a' on line 1)"),
    ("Node1 slots=1\nnode1 slots=1\n", 2, "duplicate host 'node1'"),
    ("\n# c\nmissingslots\n", 3, "missing slots=N"),
    ("missingslots # slots=2\n", 1, "missing slots=N"),
    ("this is bad slots=1\n", 1, "expected slots=N after host 'this', found 'is'"),
    ("node slot=2\n", 1, "expected slots=N"),
    ("node slots 2\n", 1, "expected slots=N"),
    ("node slots=x\n", 1, "bad slot count 'x'"),
    ("node slots=\n", 1, "bad slot count ''"),
    ("node slots=-1\n", 1, "bad slot count '-1'"),
    ("node slots=1.5\n", 1, "bad slot count '1.5'"),
    ("node slots=0\n", 1, "bad slot count 0"),
    ("node slots=99999\n", 1, "bad slot count 99999"),
    ("node slots=2 max_slots=4\n", 1, "unexpected 'max_slots=4'"),
    (PROXY_LINE, 1, "starts with '-'"),
    ("ok slots=1\nuser@node slots=1\n", 2, "contains '@'"),
    ("node;reboot slots=1\n", 1, "contains ';'"),
    ("$(id) slots=1\n", 1, "contains '$'"),
    ("node`id` slots=1\n", 1, "contains '`'"),
    ("node/x slots=1\n", 1, "contains '/'"),
    ("node:22 slots=1\n", 1, "not an IPv6 address"),
    ("node\x1b[31m slots=1\n", 1, "contains '\\x1b'"),
    ("tésla slots=1\n", 1, "contains 'é'"),
    ("a..b slots=1\n", 1, "empty label"),
    ("node- slots=1\n", 1, "starts or ends with '-'"),
    ("x" * 64 + " slots=1\n", 1, "label longer than 63"),
    (".".join(["x" * 60] * 5) + " slots=1\n", 1, "longer than 253"),
    ("10.0.0.256 slots=1\n", 1, "not a dotted-quad"),
    ("010.0.0.1 slots=1\n", 1, "not a dotted-quad"),
    ("123 slots=1\n", 1, "not a dotted-quad"),
    ("fe80::1%$(id) slots=1\n", 1, "IPv6 zone"),
]


@pytest.mark.parametrize("text, line, fragment", BAD_LINES)
def test_malformed_hostfile_names_file_and_line(text, line, fragment):
    with pytest.raises(BadInput) as e:
        parse_hostfile_text(text, "hostfiles/x")
    msg = str(e.value)
    assert msg.startswith(f"hostfiles/x:{line}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg and "\x1b" not in msg


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n   # another\n"])
def test_empty_hostfile_names_the_file(text, tmp_path):
    hf = tmp_path / "empty"
    hf.write_text(text)
    with pytest.raises(BadInput) as e:
        parse_hostfile(str(hf))
    assert str(e.value) == f"{hf}: no hosts in hostfile (only blank lines and comments)"


def test_unreadable_hostfiles(tmp_path):
    with pytest.raises(BadInput, match=r"^--hostfile: .* is a directory"):
        parse_hostfile(str(tmp_path))
    binary = tmp_path / "bin"
    binary.write_bytes(b"node1 slots=1\nnode\xff slots=1\n")
    with pytest.raises(BadInput) as e:
        parse_hostfile(str(binary))
    assert str(e.value) == f"{binary}:2: not UTF-8 text"
    big = tmp_path / "big"
    big.write_bytes(b"# padding\n" * 200_000)
    with pytest.raises(BadInput, match=r"^--hostfile: .* holds more than 1 MiB: not a hostfile"):
        parse_hostfile(str(big))


# --- host names ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["localhost", "tesla-node1", "node_01", "gpu-01.cluster.example.org", "1node", "10.0.0.1",
     "::1", "fe80::1%eth0", "2001:db8::8a2e:370:7334", "::ffff:10.0.0.1", "x" * 63,
     ".".join(["x" * 63] * 3) + ".xxxxx"],
)
def test_valid_hostnames(name):
    assert validate_hostname(name) is None


@pytest.mark.parametrize(
    "name",
    ["", "-oProxyCommand=x", "-", "a b", "a\tb", "root@node", "node/1", "node:22", "n;id", "n|x",
     "n&", "n>f", "$HOME", "n'", 'n"', "n*", "n?", "[n]", "n,m", "n%", "a..b", ".a", "a.",
     "-a", "a-", "x" * 64, "x" * 254, "256.1.1.1", "1.2.3", "01.2.3.4", "123", "fe80::1%a b",
     "fe80::1%$(id)", ":::", "node\n", "ñode"],
)
def test_invalid_hostnames(name):
    reason = validate_hostname(name)
    assert reason and "\n" not in reason


# --- specs --------------------------------------------------------------------

BAD_SPECS = [
    (dict(include="w9"), "--include: unknown host 'w9' (hostfile has: worker-0, worker-1)"),
    (dict(exclude="w9"), "--exclude: unknown host 'w9'"),
    (dict(include="worker-0:4"), "--include: host 'worker-0' has no slot 4 (it has slots 0-3)"),
    (dict(include="worker-0:-1"), "--include: bad slot '-1'"),
    (dict(include="worker-0:0,,1"), "--include: bad slot ''"),
    (dict(include="worker-0: 1"), "--include: bad slot ' 1'"),
    (dict(include="@worker-0"), "--include: empty host"),
    (dict(include="worker-0@@worker-1"), "--include: empty host"),
    (dict(include="worker-0:0:1"), "--include: write the IPv6 host"),
    (dict(include="worker-0;id"), "--include: bad host name 'worker-0;id': contains ';'"),
    (dict(include="[::1"), "--include: unclosed '['"),
    (dict(include="[::1]x"), "--include: unexpected 'x' after ']'"),
    (dict(include="worker-0", exclude="worker-1"), "--exclude: cannot be combined with --include"),
    (dict(include="worker-0", num_nodes=1), "--num-nodes: cannot be combined with --include/--exclude"),
    (dict(exclude="worker-0", num_gpus=1), "--gpus: cannot be combined with --include/--exclude"),
    (dict(num_nodes=0), "--num-nodes: must be at least 1"),
    (dict(num_gpus=0), "--gpus: must be at least 1"),
    (dict(num_gpus=5), "--gpus: 5 asked but host 'worker-0' has 4 slot(s)"),
]


@pytest.mark.parametrize("kwargs, expected", BAD_SPECS)
def test_malformed_specs_name_the_option(kwargs, expected):
    with pytest.raises(BadInput) as e:
        resolve_resources(W2, **kwargs)
    assert str(e.value).startswith(expected), str(e.value)


def test_unknown_host_message_is_short_for_big_clusters():
    pool = {f"n{i:03d}": 8 for i in range(64)}
    with pytest.raises(BadInput) as e:
        resolve_resources(pool, include="n999")
    assert str(e.value).endswith("n005, ... (64 hosts))")


# --- argparse glue -----------------------------------------------------------------


def _parse(argv):
    p = Parser()
    add_options(p, HostSelection)
    return from_args(HostSelection, p.parse_args(argv))


def resources_from_args(hosts: HostSelection, local_hosts=None):
    return hosts.resources(local_hosts)


def test_resources_from_args():
    tesla = str(REPO / "hostfiles" / "tesla")
    assert resources_from_args(_parse([])) is None
    assert resources_from_args(_parse(["--hostfile", tesla, "--exclude", "tesla-node5"])) == {
        f"tesla-node{i}": [0] for i in range(1, 5)
    }
    assert resources_from_args(_parse(["--hostfile", tesla, "--num-nodes", "2"])) == {
        "tesla-node1": [0], "tesla-node2": [0]
    }
    # Without a hostfile the filters apply to this machine, as `deepspeed --include localhost:1` does.
    assert resources_from_args(_parse(["--include", "localhost:1"]), local_hosts={"localhost": 2}) == {
        "localhost": [1]
    }
    with pytest.raises(BadInput, match=r"^--include: needs --hostfile$"):
        resources_from_args(_parse(["--include", "localhost:1"]))
    with pytest.raises(BadInput, match=r"^--num-nodes: needs --hostfile$"):
        resources_from_args(_parse(["--num-nodes", "1"]))


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.0"])
def test_count_options_refuse_non_positive(value):
    with pytest.raises(BadInput, match="--num-nodes"):
        _parse(["--num-nodes", value])
