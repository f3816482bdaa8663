#!/bin/bash
# Build the real docker/Dockerfile and run bench inside it, on a machine
# where no image can be pulled and no Docker daemon runs (CI, this machine).
#
#   make docker-test          # = sudo docker/test-build.sh; minutes, not part of `make test`
#
# 1. starts a dockerd of its own if none answers (stopped again by its PID);
# 2. makes a stand-in base image offline, Debian 12 from debootstrap, in
#    place of nvidia/cuda (BASE_IMAGE build argument);
# 3. serves a wheelhouse over HTTP for the build (WHEELS_URL): the pinned
#    files found in pip's local caches (symlinks: the 5.5 GB CUDA torch is not
#    fetched or copied again), the rest fetched by the host's pip, whose
#    certificate settings reach PyPI where the build container's may not;
# 4. builds vitbench:latest through docker/build.sh with the legacy builder;
# 5. runs `bench --help`, `bench probe`, a 2-rank CPU run, then the same run
#    through docker-compose with docker/compose.cpu.yaml, and checks the
#    compose files.
# Each step prints its time as "[test-build] STEP: N s".
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state=${VITBENCH_DOCKER_STATE:-/var/tmp/vitbench-docker}   # daemon data + base rootfs, reused
base=vitbench-base:bookworm
image=vitbench:latest
mkdir -p "$state"
work=$(mktemp -d /tmp/vitbench-test-build.XXXXXX)
dockerd_pid="" server_pid=""

log() { echo "[test-build] $*" >&2; }
timed() {  # timed NAME CMD...: run, then print its wall time
    local name=$1 t0=$SECONDS
    shift
    "$@"
    log "$name: $((SECONDS - t0)) s"
}
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    if [ -n "$dockerd_pid" ]; then
        log "stopping the dockerd this script started (pid $dockerd_pid)"
        kill "$dockerd_pid" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 1; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

need=""
command -v dockerd >/dev/null || need="$need docker.io"
command -v docker-compose >/dev/null || need="$need docker-compose"
command -v debootstrap >/dev/null || need="$need debootstrap"
if [ -n "$need" ]; then
    log "installing:$need"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    # No iptables and no default bridge: neither is available in an
    # unprivileged CI container, and builds use --network host.
    dockerd --data-root "$state/data" --iptables=false --bridge=none \
        >"$state/dockerd.log" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { tail -20 "$state/dockerd.log" >&2; exit 1; }
    log "started dockerd (pid $dockerd_pid, data root $state/data)"
fi
export DOCKER_BUILDKIT=0

make_base() {
    local rootfs=$state/rootfs
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$state/debootstrap.log"
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    rm -rf "$rootfs"
}
if docker image inspect "$base" >/dev/null 2>&1; then
    log "debootstrap: skipped, $base exists"
else
    timed debootstrap make_base
fi

# Wheels of the pinned versions found in pip's local caches, as symlinks
# behind a local HTTP server: no 5 GB copy into the build context, no layer
# that holds them. pip still takes every version from the locks.
wheels=$work/wheels
mkdir -p "$wheels"
python3 - "$wheels" requirements.lock requirements-mpi.lock <<'PY'
import os, re, sys
out, locks = sys.argv[1], sys.argv[2:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
pins = {}
for lock in locks:
    for line in open(lock):
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if m:
            pins[norm(m.group(1))] = m.group(2)
found = 0
for d in ("/opt/wheels", "/opt/pypi/files", "/opt/pypi-more/files"):
    if not os.path.isdir(d):
        continue
    for f in os.listdir(d):
        parts = f.split("-")
        if f.endswith((".whl", ".tar.gz")) and len(parts) >= 2 and pins.get(norm(parts[0])) == parts[1]:
            dst = os.path.join(out, f)
            if not os.path.exists(dst):
                os.symlink(os.path.join(d, f), dst)
                found += 1
missing = [f"{n}=={v}" for n, v in pins.items()
           if not any(norm(f.split("-")[0]) == n and f.split("-")[1] == v for f in os.listdir(out))]
print(f"[test-build] wheel cache: {found} files of {len(pins)} pins", file=sys.stderr)
open(os.path.join(out, "..", "missing.txt"), "w").write("".join(m + "\n" for m in missing))
PY
pip=(python3 -m pip)
[ -x .venv/bin/pip ] && pip=(.venv/bin/pip)
# --no-deps: the locks are complete. wheel: pip's build requirement for an
# sdist without pyproject.toml (deepspeed), pinned here as the locks pin the rest.
timed "wheelhouse" "${pip[@]}" download -q --no-deps -d "$wheels" \
    -r "$work/missing.txt" "wheel==0.46.3" 2>&1 | grep -v "is ignored" >&2 || true
# A fixed port: WHEELS_URL is part of the pip layer's cache key.
port=${VITBENCH_WHEELS_PORT:-38123}
python3 -m http.server --bind 127.0.0.1 --directory "$wheels" "$port" >"$work/http.log" 2>&1 &
server_pid=$!

build_image() {
    docker/build.sh --network host --build-arg "BASE_IMAGE=$base" \
        --build-arg "WHEELS_URL=http://127.0.0.1:$port/" >"$state/build.log" 2>&1 \
        || { tail -40 "$state/build.log" >&2; log "build failed, log: $state/build.log"; return 1; }
}
timed build build_image
kill "$server_pid"; server_pid=""

identity="$(docker run --rm --entrypoint cat "$image" /etc/vitbench-image)"
log "image identity: $identity"

# Results are written by the image's user (uid 1000), not by root.
results=$work/results data=$work/data
mkdir -p "$results" "$data"
chown 1000:1000 "$results" "$data"
run=(docker run --rm --ipc host -v "$data:/data" -v "$results:/results")

timed "bench --help" "${run[@]}" "$image" --help >"$work/help.out"
grep -q "probe" "$work/help.out"

timed "bench probe" "${run[@]}" "$image" probe --local --json >"$work/probe.json"
python3 - "$work/probe.json" "$identity" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
nodes = doc if isinstance(doc, list) else doc.get("nodes") or doc.get("inventories") or [doc]
images = {n.get("image") for n in nodes}
assert images == {sys.argv[2]}, f"bench probe reports image {images}, expected {sys.argv[2]!r}"
print(f"[test-build] bench probe reports image {sys.argv[2]}", file=sys.stderr)
PY
timed "bench probe (table)" "${run[@]}" "$image" probe >/dev/null

steps=(--gpus 2 --dataset synthetic --steps 10 --model vit-micro-p4-32 --json)
timed "bench run, 2 CPU ranks" "${run[@]}" "$image" "${steps[@]}" >"$work/run.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"] == "ok", r["status"]' "$work/run.json"

export VITBENCH_DATA=$data VITBENCH_RESULTS=$results
timed "docker-compose config" docker-compose -f compose.yaml config -q
docker-compose -f docker/compose.cpu.yaml config -q
docker-compose -f compose.yaml --profile multinode config -q
timed "docker-compose run bench, 2 CPU ranks" \
    docker-compose -f docker/compose.cpu.yaml run --rm -T bench "${steps[@]}" >"$work/compose-run.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"] == "ok", r["status"]' "$work/compose-run.json"
docker-compose -f docker/compose.cpu.yaml down --remove-orphans >/dev/null 2>&1 || true

log "all passed ($(ls "$results" | wc -l) run directories written)"
