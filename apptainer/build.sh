#!/bin/sh
# Build the SIF of an image variant from the Docker image docker/build.sh made
# (one recipe, docker/Dockerfile, for both; apptainer/vit.def around it).
#
#   docker/build.sh && apptainer/build.sh                                   # vit.sif from vitbench:latest
#   docker/build.sh --variant pascal && apptainer/build.sh --variant pascal # vit-pascal.sif from vitbench:pascal
#   apptainer/build.sh --variant pascal /shared/vit-pascal.sif              # another output path
#   docker/build.sh --variant rocm && apptainer/build.sh --variant rocm     # vit-rocm.sif (apptainer exec --rocm)
#
# vit.def names vitbench:latest; for another variant its From line is
# rewritten in a temporary copy (SingularityCE has no build arguments, and
# Apptainer's need 1.2+). SINGULARITY=singularity for SingularityCE.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
variant=default
if [ "${1:-}" = "--variant" ]; then
    [ $# -ge 2 ] || { echo "apptainer/build.sh: --variant needs a name (default, pascal, rocm)" >&2; exit 2; }
    variant=$2
    shift 2
fi
case "$variant" in
    default) image=vitbench:latest sif=vit.sif ;;
    pascal) image=vitbench:pascal sif=vit-pascal.sif ;;
    rocm) image=vitbench:rocm sif=vit-rocm.sif ;;   # run with --rocm, not --nv
    *) echo "apptainer/build.sh: --variant: unknown '$variant' (default, pascal, rocm)" >&2; exit 2 ;;
esac
sif=${1:-$sif}
def=$(mktemp "${TMPDIR:-/tmp}/vit-def.XXXXXX")
trap 'rm -f "$def"' EXIT
sed -e "s|^From: vitbench:latest\$|From: ${image}|" \
    -e "s|io.vitbench.source docker-daemon:vitbench:latest|io.vitbench.source docker-daemon:${image}|" \
    "$root/apptainer/vit.def" > "$def"
grep -q "^From: ${image}\$" "$def" || { echo "apptainer/build.sh: vit.def has no 'From: vitbench:latest' line" >&2; exit 1; }
echo "apptainer/build.sh: building ${sif} (variant ${variant}) from docker-daemon ${image}" >&2
"${SINGULARITY:-apptainer}" build "$sif" "$def"
