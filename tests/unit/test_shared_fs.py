"""What the results root is on a host (bench.cluster.shared_dir.mount_of): the mount holding it, read from that host's
/proc/self/mountinfo, and the options that change what another host sees. The lines follow proc(5)'s format (its own
example first); the NFS options are nfs(5)'s."""

from __future__ import annotations

import pytest

from bench.cluster.shared_dir import ANSWER_SOURCE, fs_text, fs_warning, mount_of

MOUNTINFO = """\
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:45 / /shared rw,relatime shared:20 - nfs4 fs1:/export rw,vers=4.2,rsize=1048576,hard,proto=tcp,nocto,lookupcache=pos,local_lock=none,addr=10.1.0.5
41 40 0:46 / /shared/scratch rw,relatime - lustre 10.2.0.1@o2ib:/scratch rw,flock,lazystatfs
42 22 0:47 / /home/a\\040b rw,nosuid - fuse.sshfs head:/home rw,user_id=0,group_id=0
"""


@pytest.mark.parametrize("path, fstype, mount, options", [
    ("/shared/results", "nfs4", "/shared", ["vers=4.2", "nocto", "lookupcache=pos", "local_lock=none"]),
    ("/shared/scratch/run1", "lustre", "/shared/scratch", ["flock"]),
    ("/shared", "nfs4", "/shared", ["vers=4.2", "nocto", "lookupcache=pos", "local_lock=none"]),
    ("/sharedX/results", "ext4", "/", []),
    ("/home/a b/out", "fuse.sshfs", "/home/a b", []),
])
def test_the_mount_holding_a_path_is_the_longest_mount_point_above_it(tmp_path, path, fstype, mount, options):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    got = mount_of(path, str(info))
    assert (got["type"], got["mount"], got["options"]) == (fstype, mount, options)


def test_nocto_is_warned_of_and_named_and_a_default_mount_is_not(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    nfs = mount_of("/shared/results", str(info))
    assert "nocto" in fs_warning(nfs) and "/shared" in fs_warning(nfs)
    assert fs_warning(mount_of("/shared/scratch/x", str(info))) is None
    assert fs_text(nfs) == "nfs4 /shared (vers=4.2, nocto, lookupcache=pos, local_lock=none)"
    assert mount_of("/x", str(tmp_path / "none")) is None and fs_text(None) == "filesystem unknown"


def test_the_probe_code_carries_what_it_needs_to_say_it_on_a_host_without_bench():
    ns: dict = {}
    exec(ANSWER_SOURCE, ns)
    got = ns["mount_of"]("/")
    assert got is not None and got["mount"] == "/"
