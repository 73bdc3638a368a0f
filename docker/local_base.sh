#!/usr/bin/env bash
# Builds a local stand-in for NVIDIA's nvidia/cuda:<CUDA>-devel-ubuntu22.04 image where no
# container registry can be reached, and tags it with that name, so that the Dockerfile's
# `FROM nvidia/cuda:...` uses it unchanged:
#
#   docker/local_base.sh [13.0.2]        (root: debootstrap and chroot need it)
#
# What it is made of:
#   * Ubuntu 22.04 (jammy), minimal, from Ubuntu's archive with debootstrap, checked against
#     Ubuntu's archive keyring (the ubuntu-keyring package, pinned by checksum below); the apt
#     sources of the ubuntu:22.04 image (main, restricted, universe, multiverse; -updates,
#     -backports, -security); ca-certificates, curl and gnupg, which NVIDIA's base also installs
#     (as gnupg2, a universe alias of gnupg in jammy).
#   * CUDA from NVIDIA's wheels on the package index, pinned to the versions of that CUDA release
#     (the cuda-toolkit meta-package of the release lists them), laid out by
#     docker/cuda_from_wheels.py as NVIDIA's packages do: /usr/local/cuda-X.Y with bin/ (nvcc,
#     ptxas, cuobjdump, ...), nvvm/, include/ and lib64/ (-> targets/x86_64-linux/), linked from
#     /usr/local/cuda and /usr/local/cuda-X: the compiler and runtime, CCCL, CUPTI, NVTX, NVRTC,
#     nvJitLink and the math libraries whose headers torch's headers include (cuBLAS, cuSPARSE,
#     cuSOLVER, cuRAND, cuFFT).
#   * NVIDIA's environment: CUDA_VERSION, PATH (/usr/local/nvidia/bin:/usr/local/cuda/bin:...),
#     LD_LIBRARY_PATH (/usr/local/nvidia/lib:/usr/local/nvidia/lib64), LIBRARY_PATH
#     (/usr/local/cuda/lib64/stubs), NVARCH, NVIDIA_REQUIRE_CUDA, NV_CUDA_CUDART_VERSION,
#     NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, and the ld.so.conf.d entries; CUDA_HOME
#     is not set, as in NVIDIA's image (torch finds the toolkit through nvcc on PATH).
# What differs from NVIDIA's image: no NVIDIA apt repository, no cuda-compat package, no Nsight
# tools, NPP, nvJPEG or NCCL, no libcuda stub; cuobjdump is 13.2's (the oldest on the package
# index; it reads 13.0's binaries).
#
# Only CUDA 13.0 can be assembled this way: CUDA 12.8's nvcc wheel (nvidia-cuda-nvcc-cu12)
# carries ptxas but neither nvcc nor cicc. For 12.8, use NVIDIA's image from a registry.
#
# An image of that name that this script did not build (NVIDIA's own, pulled) is left alone; one
# it built from the same recipe is reused (FORCE=1 rebuilds).
#
# Environment: DOCKER (client, default docker), PYTHON (default python3, for pip and the
# wheel layout), UBUNTU_MIRROR (default http://archive.ubuntu.com/ubuntu), FORCE=1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=docker/retry.sh
. "$here/retry.sh"

DOCKER=${DOCKER:-docker}
PY=${PYTHON:-python3}
MIRROR=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
SECURITY_MIRROR=${UBUNTU_SECURITY_MIRROR:-http://security.ubuntu.com/ubuntu}
say() { printf 'local_base: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

cuda=${1:-13.0.2}
case "$cuda" in
  13.0 | 13.0.2)
    cuda=13.0.2
    # cuda-toolkit==13.0.2's pins (pip download cuda-toolkit==13.0.2; its METADATA), plus
    # cuobjdump, which has no 13.0 wheel.
    wheels=(
      nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
      nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-cupti==13.0.85
      nvidia-nvtx==13.0.85 nvidia-cuda-profiler-api==13.0.85 nvidia-cuda-culibos==13.0.85
      nvidia-cuda-nvrtc==13.0.88 nvidia-nvjitlink==13.0.88 nvidia-cublas==13.1.0.3
      nvidia-cusparse==12.6.3.3 nvidia-cusolver==12.0.4.66 nvidia-curand==10.4.0.35
      nvidia-cufft==12.0.0.61
      nvidia-cuda-cuobjdump==13.2.51
    )
    cudart_deb_version=13.0.96-1
    ;;
  12.8*)
    die "CUDA $cuda cannot be assembled from the package index: its nvcc wheel (nvidia-cuda-nvcc-cu12) carries ptxas but neither nvcc nor cicc. Use NVIDIA's nvidia/cuda:${cuda}-devel-ubuntu22.04 from a registry."
    ;;
  *) die "no recipe for CUDA $cuda (have: 13.0.2)" ;;
esac
mm=${cuda%.*}       # 13.0
major=${cuda%%.*}   # 13
tag="nvidia/cuda:${cuda}-devel-ubuntu22.04"

# Ubuntu's archive keyring: the ubuntu-keyring package of jammy, and the keyring file in it.
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb
KEYRING_DEB_SHA256=0d0e7ed6b112f5d03eabf3c7eb01ebdacf9c57714b279e90495cfc58c8c4520f
KEYRING_SHA256=1a4dd63e5c76728960a2edddae22e2e0fc53df8e8b87806deb971030ac704eb0

# The recipe's identity: this script, the layout script and the CUDA release. An image built
# from another recipe is rebuilt.
recipe=$(cat "$here/local_base.sh" "$here/cuda_from_wheels.py" | sha256sum | cut -c1-16)
marker="flashattn local stand-in for $tag (recipe $recipe)"

if "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
  comment=$("$DOCKER" image inspect --format '{{.Comment}}' "$tag")
  case "$comment" in
    "$marker")
      if [ "${FORCE:-0}" != 1 ]; then
        say "$tag is up to date ($marker)"
        exit 0
      fi
      ;;
    "flashattn local stand-in"*) say "$tag is from another recipe: rebuilding" ;;
    *)
      say "$tag is already here and was not built by this script (NVIDIA's image): using it"
      exit 0
      ;;
  esac
fi

[ "$(id -u)" = 0 ] || die "debootstrap and chroot need root"
for tool in debootstrap dpkg-deb sha256sum tar curl; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install debootstrap curl)"
done

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/flashattn-cuda-base.XXXXXX")
root=$work/rootfs
cleanup() {
  # debootstrap mounts /proc and /sys in the target while it works: unmount whatever is still
  # mounted under it before removing it, and never cross into another file system.
  if [ -d "$root" ]; then
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m" || true; done
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# --- 1. Ubuntu 22.04 ---------------------------------------------------------------------------------
say "Ubuntu's archive keyring ($KEYRING_DEB)"
retry curl -fsSL -o "$work/ubuntu-keyring.deb" "$MIRROR/$KEYRING_DEB"
echo "$KEYRING_DEB_SHA256  $work/ubuntu-keyring.deb" | sha256sum -c --quiet - ||
  die "ubuntu-keyring.deb does not match its pinned checksum"
dpkg-deb -x "$work/ubuntu-keyring.deb" "$work/keyring"
keyring=$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg
echo "$KEYRING_SHA256  $keyring" | sha256sum -c --quiet - || die "ubuntu-archive-keyring.gpg does not match its pinned checksum"

bootstrap() {
  rm -rf --one-file-system "$root"
  debootstrap --variant=minbase --keyring="$keyring" --include=ca-certificates,curl,gnupg \
    jammy "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    [ ! -f "$root/debootstrap/debootstrap.log" ] || tail -n 20 "$root/debootstrap/debootstrap.log" >&2
    return 1
  }
}
say "debootstrap jammy (minbase) from $MIRROR"
retry bootstrap
step=$(date +%s)
say "Ubuntu root ready in $((step - start)) s"

cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR jammy main restricted universe multiverse
deb $MIRROR jammy-updates main restricted universe multiverse
deb $MIRROR jammy-backports main restricted universe multiverse
deb $SECURITY_MIRROR jammy-security main restricted universe multiverse
EOF
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
# As in the ubuntu image: apt keeps no package cache.
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF

# --- 2. CUDA from the wheels ------------------------------------------------------------------------
say "CUDA $cuda: ${#wheels[@]} wheels from the package index"
mkdir -p "$work/wheels"
retry "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  --dest "$work/wheels" "${wheels[@]}"
prefix=/usr/local/cuda-$mm
"$PY" "$here/cuda_from_wheels.py" --prefix "$root$prefix" "$work"/wheels/*.whl
ln -s "cuda-$mm" "$root/usr/local/cuda"
ln -s "cuda-$mm" "$root/usr/local/cuda-$major"
printf '/usr/local/nvidia/lib\n/usr/local/nvidia/lib64\n' >"$root/etc/ld.so.conf.d/nvidia.conf"
printf '/usr/local/cuda/targets/x86_64-linux/lib\n/usr/local/cuda-%s/targets/x86_64-linux/lib\n' "$major" \
  >"$root/etc/ld.so.conf.d/988_cuda-$major.conf"
chroot "$root" /sbin/ldconfig
"$root$prefix/bin/nvcc" --version | grep -q "release $mm," || die "the assembled nvcc is not CUDA $mm's"
say "CUDA tree ready in $(($(date +%s) - step)) s ($(du -sh "$root$prefix" | cut -f1))"
step=$(date +%s)

# --- 3. the image ------------------------------------------------------------------------------------
say "docker import as $tag"
tar -C "$root" --numeric-owner -c . | "$DOCKER" import \
  --message "$marker" \
  --change "ENV NVARCH=x86_64" \
  --change "ENV NVIDIA_REQUIRE_CUDA=cuda>=$mm" \
  --change "ENV NV_CUDA_CUDART_VERSION=$cudart_deb_version" \
  --change "ENV CUDA_VERSION=$cuda" \
  --change "ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64" \
  --change "ENV LIBRARY_PATH=/usr/local/cuda/lib64/stubs" \
  --change "ENV NVIDIA_VISIBLE_DEVICES=all" \
  --change "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility" \
  --change 'CMD ["/bin/bash"]' \
  - "$tag" >/dev/null

# The image answers like NVIDIA's: nvcc and cuobjdump on PATH, the headers where nvcc looks.
"$DOCKER" run --rm "$tag" bash -c '
  set -e
  nvcc --version | grep -q "release '"$mm"',"
  cuobjdump --version >/dev/null
  test -f /usr/local/cuda/include/cuda_runtime.h && test -f /usr/local/cuda/include/cublas_v2.h
  test -e /usr/local/cuda/lib64/libcudart.so
  . /etc/os-release && test "$VERSION_ID" = 22.04' || die "the imported image does not work as a CUDA $cuda devel image"
size=$("$DOCKER" image inspect --format '{{.Size}}' "$tag")
say "$tag ready in $(($(date +%s) - step)) s ($((size / 1000000)) MB); $(($(date +%s) - start)) s in all"
