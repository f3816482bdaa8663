#!/bin/bash
# Build the real docker/Dockerfile and run bench inside it, on a machine
# where no image can be pulled and no Docker daemon runs (CI, this machine).
#
#   make docker-test          # = sudo docker/test-build.sh; minutes, not part of `make test`
#
# 1. starts a dockerd of its own if none answers (stopped again by its PID);
#    with DOCKER_HOST=unix:///PATH it listens there, its pid and exec root in
#    the state dir, so it stands beside another daemon on the machine;
# 2. makes a stand-in base image offline, Debian 12 from debootstrap, in
#    place of nvidia/cuda (BASE_IMAGE build argument);
# 3. serves a wheelhouse over HTTP for the build (WHEELS_URL): the pinned
#    files of every lock found in pip's local caches (symlinks: the 5.5 GB
#    CUDA torch is not fetched or copied again), the rest fetched once by the
#    host's pip into the state dir (the pascal variant's CUDA 12.6 torch:
#    3.5 GB), whose certificate settings reach PyPI where the build
#    container's may not;
# 4. builds both image variants through docker/build.sh with the legacy
#    builder: vitbench:latest, then `--variant pascal` (vitbench:pascal);
# 5. runs in each `bench --help`, `bench probe` (the image's identity, and
#    its torch's arch list against bench/data/image_variants.json: read from
#    the installed library, no GPU), a 2-rank CPU run; then the default's run
#    through docker-compose with docker/compose.cpu.yaml, and checks the
#    compose files.
# VARIANTS="pascal" builds one only. Each step prints its time as
# "[test-build] STEP: N s".
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state=${VITBENCH_DOCKER_STATE:-/var/tmp/vitbench-docker}   # daemon data + base rootfs, reused
base=vitbench-base:bookworm
variants=${VARIANTS:-default pascal}
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
    own=()
    if [[ "${DOCKER_HOST:-}" == unix://* ]]; then
        own=(-H "$DOCKER_HOST" --exec-root "$state/exec" --pidfile "$state/dockerd.pid")
    fi
    dockerd --data-root "$state/data" --iptables=false --bridge=none "${own[@]}" \
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
# Kept in the state dir: what pip fetched is not fetched again on the next run.
wheels=$state/wheelhouse
mkdir -p "$wheels"
python3 - "$wheels" "$work/missing.txt" requirements.lock requirements-pascal.lock requirements-mpi.lock <<'PY'
import os, re, sys
out, missing_txt, locks = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
pins = set()  # (name, version): the variants pin torch at two versions
for lock in locks:
    for line in open(lock):
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if m:
            pins.add((norm(m.group(1)), m.group(2)))
found = 0
for d in ("/opt/wheels", "/opt/pypi/files", "/opt/pypi-more/files"):
    if not os.path.isdir(d):
        continue
    for f in os.listdir(d):
        parts = f.split("-")
        if f.endswith((".whl", ".tar.gz")) and len(parts) >= 2 and (norm(parts[0]), parts[1]) in pins:
            dst = os.path.join(out, f)
            if not os.path.lexists(dst):
                os.symlink(os.path.join(d, f), dst)
                found += 1
have = {(norm(f.split("-")[0]), f.split("-")[1]) for f in os.listdir(out) if "-" in f}
missing = sorted(f"{n}=={v}" for n, v in pins - have)
print(f"[test-build] wheel cache: {found} new links, {len(pins) - len(missing)} of {len(pins)} pins at hand",
      file=sys.stderr)
open(missing_txt, "w").write("".join(m + "\n" for m in missing))
PY
pip=(python3 -m pip)
[ -x .venv/bin/pip ] && pip=(.venv/bin/pip)
# --no-deps: the locks are complete. wheel: pip's build requirement for an
# sdist without pyproject.toml (deepspeed), pinned here as the locks pin the rest.
timed "wheelhouse" "${pip[@]}" download -q --no-deps -d "$wheels" \
    -r "$work/missing.txt" "wheel==0.46.3" 2>&1 | grep -v "is ignored" >&2 || true
# What each variant's torch wheel really carries, from its libtorch_cuda.so (no GPU, no cuobjdump); the
# lock headers quote it.
for whl in "$wheels"/torch-[0-9]*.whl; do
    log "$(basename "$whl"): $(python3 scripts/fatbin_arches.py "$whl" | tr '\n' ' ')"
done
# A fixed port: WHEELS_URL is part of the pip layer's cache key.
port=${VITBENCH_WHEELS_PORT:-38123}
python3 -m http.server --bind 127.0.0.1 --directory "$wheels" "$port" >"$work/http.log" 2>&1 &
server_pid=$!

image_of() { [ "$1" = default ] && echo vitbench:latest || echo "vitbench:$1"; }
build_image() {  # build_image VARIANT; the stand-in base overrides the variant's (the last --build-arg wins)
    local v=$1 flag=()
    [ "$v" = default ] || flag=(--variant "$v")
    docker/build.sh "${flag[@]}" --network host --build-arg "BASE_IMAGE=$base" \
        --build-arg "WHEELS_URL=http://127.0.0.1:$port/" >"$state/build-$v.log" 2>&1 \
        || { tail -40 "$state/build-$v.log" >&2; log "build failed, log: $state/build-$v.log"; return 1; }
}
for v in $variants; do
    timed "build $v" build_image "$v"
done
kill "$server_pid"; server_pid=""

# Results are written by the image's user (uid 1000), not by root.
results=$work/results data=$work/data
mkdir -p "$results" "$data"
chown 1000:1000 "$results" "$data"
run=(docker run --rm --ipc host -v "$data:/data" -v "$results:/results")
steps=(--gpus 2 --dataset synthetic --steps 10 --model vit-micro-p4-32 --json)

check_image() {  # check_image VARIANT: identity, the torch the variant promises, bench in it
    local v=$1 image
    image=$(image_of "$v")
    identity="$(docker run --rm --entrypoint cat "$image" /etc/vitbench-image)"
    log "$v: image identity: $identity"
    timed "$v: bench --help" "${run[@]}" "$image" --help >"$work/help-$v.out"
    grep -q "probe" "$work/help-$v.out"
    timed "$v: bench probe" "${run[@]}" "$image" probe --local --with-torch --json >"$work/probe-$v.json"
    python3 - "$work/probe-$v.json" "$identity" "$v" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
identity, variant = sys.argv[2], sys.argv[3]
nodes = doc if isinstance(doc, list) else doc.get("nodes") or doc.get("inventories") or [doc]
images = {n.get("image") for n in nodes}
assert images == {identity}, f"bench probe reports image {images}, expected {identity!r}"
torch = nodes[0]["torch"]
want = next(x for x in json.load(open("bench/data/image_variants.json"))["variants"] if x["name"] == variant)
# The arch list the installed libtorch was built for (torch._C._cuda_getArchFlags(), no GPU needed).
assert torch["arch_list"] == want["arch_list"], f"{variant}: image torch {torch['version']} arch list " \
    f"{torch['arch_list']} != bench/data/image_variants.json {want['arch_list']}"
assert torch["version"] == want["torch"], (torch["version"], want["torch"])
print(f"[test-build] {variant}: bench probe reports image {identity}, torch {torch['version']} "
      f"(CUDA {torch.get('cuda')}, NCCL {torch.get('nccl')}) built for {' '.join(torch['arch_list'])}",
      file=sys.stderr)
PY
    timed "$v: bench probe (table)" "${run[@]}" "$image" probe >/dev/null
    timed "$v: bench run, 2 CPU ranks" "${run[@]}" "$image" "${steps[@]}" >"$work/run-$v.json"
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"] == "ok", r["status"]; \
print("[test-build] %s: 2-rank run ok, %.1f img/s, torch %s, deepspeed %s" % (sys.argv[2], r["figures"]["images_per_s"], \
r["provenance"]["versions"]["torch"], r["provenance"]["versions"]["deepspeed"]), file=sys.stderr)' "$work/run-$v.json" "$v"
}
for v in $variants; do
    check_image "$v"
done
case " $variants " in *" default "*) ;; *) log "all passed (variants: $variants; compose skipped: it runs vitbench:latest)"; exit 0 ;; esac

export VITBENCH_DATA=$data VITBENCH_RESULTS=$results
timed "docker-compose config" docker-compose -f compose.yaml config -q
docker-compose -f docker/compose.cpu.yaml config -q
docker-compose -f compose.yaml --profile multinode config -q
timed "docker-compose run bench, 2 CPU ranks" \
    docker-compose -f docker/compose.cpu.yaml run --rm -T bench "${steps[@]}" >"$work/compose-run.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"] == "ok", r["status"]' "$work/compose-run.json"
docker-compose -f docker/compose.cpu.yaml down --remove-orphans >/dev/null 2>&1 || true

log "all passed ($(ls "$results" | wc -l) run directories written)"
