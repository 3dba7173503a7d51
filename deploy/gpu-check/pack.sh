#!/usr/bin/env bash
# Fill .gpu-check/ (ignored) with what deploy/gpu-check/check.py needs on a GPU host
# without network: Cohort's wheel, the wheels of what `cohort up` and the agent import
# (for one CPython version, manylinux x86_64), and redis-server from Debian bookworm.
# Run here, where PyPI and Debian's archive are reachable:
#
#   deploy/gpu-check/pack.sh [PYTHON_VERSION]
#
# PYTHON_VERSION: the GPU host's (default 3.12). Not packed: what a host with PyTorch has
# (numpy: the agent reads event files with tensorboard's tensor_util, which imports it),
# TensorFlow (replicas of `command` jobs need none), the S3 client chain
# (s3fs, aiobotocore, botocore: the check keeps artifacts in its DATA_DIR), dev tools.
set -euo pipefail

version=3.12
for arg in "$@"; do
    case "$arg" in
        3.*) version="$arg" ;;
        *) echo "usage: $0 [PYTHON_VERSION]" >&2; exit 2 ;;
    esac
done

root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
out="$root/.gpu-check"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out/wheels" "$out/redis"

# -- Cohort's wheel, built from a copy of what the Dockerfile's wheel stage copies --------
for part in pyproject.toml README.md alembic api services workers cli cohort; do
    cp -r "$root/$part" "$work/"
done
python3 -m pip wheel --quiet --no-deps --wheel-dir "$out/wheels" "$work"

# -- Its dependencies: pyproject's base list (less the S3 chain) and the node extra's
# GPU discovery and event-file readers, resolved for the target interpreter --------------
python3 - "$root/pyproject.toml" >"$work/requirements.txt" <<'PY'
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
skip = {"s3fs"}
wanted = {"nvidia-ml-py", "crc32c"}
names = [r for r in project["dependencies"] if r.split("=")[0].split("[")[0] not in skip]
names += [r for r in project["optional-dependencies"]["node"] if r.split("=")[0] in wanted]
print("\n".join(names))
PY
# The target's interpreter where there is one that runs (its markers: see below).
pip=python3
if "python$version" -c "" 2>/dev/null; then pip="python$version"; fi
target=(--only-binary=:all: --python-version "$version" --implementation cp
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
    --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64
    --platform manylinux1_x86_64 --platform any)
"$pip" -m pip download --quiet "${target[@]}" --dest "$out/wheels" -r "$work/requirements.txt"
# tensorboard without its server (grpcio, werkzeug, pillow, numpy...): the agent uses
# its protos and tensor_util alone (workers/node/tfevents.py).
tensorboard="$(grep -o '"tensorboard==[^"]*"' "$root/pyproject.toml" | tr -d '"')"
# packaging: kombu's Redis transport imports it without declaring it.
extra=("$tensorboard" protobuf absl-py six packaging)
# pip evaluates environment markers with the interpreter it runs on, not --python-version:
# redis-py needs async-timeout below Python 3.11.3 (Debian bookworm's 3.11 is 3.11.2).
case "$version" in 3.11*) extra+=(async-timeout) ;; esac
"$pip" -m pip download --quiet "${target[@]}" --no-deps --dest "$out/wheels" "${extra[@]}"

# -- redis-server from Debian bookworm, with the shared libraries it links ----------------
# redis-server is a link to redis-check-rdb (redis-tools); libc and libstdc++ are the
# host's (the binary needs glibc 2.34 or later).
debs=(redis-server redis-tools libjemalloc2 liblzf1 libssl3 libatomic1 libsystemd0
    libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1)
(cd "$work" && apt-get download "${debs[@]}" >/dev/null)
for deb in "$work"/*.deb; do
    dpkg -x "$deb" "$work/root"
done
mkdir -p "$out/redis/bin" "$out/redis/lib"
cp "$work/root/usr/bin/redis-check-rdb" "$out/redis/bin/"
ln -s redis-check-rdb "$out/redis/bin/redis-server-binary"
find "$work/root" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -P {} "$out/redis/lib/" \;
cat >"$out/redis/bin/redis-server" <<'SH'
#!/bin/sh
# redis-server from Debian bookworm with its own libraries (pack.sh); the binary reads
# its name: called as redis-server, it is the server.
here="$(cd "$(dirname "$0")" && pwd)"
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    exec "$here/redis-server-binary" "$@"
SH
chmod 0755 "$out/redis/bin/redis-server"
"$out/redis/bin/redis-server" --version

# -- What the host runs, and the total --------------------------------------------------
ls "$out/wheels" >"$out/MANIFEST"
echo "packed for CPython $version: $(ls "$out/wheels" | wc -l) wheels, redis in .gpu-check/redis"
du -sh "$out" | sed 's|\t.*| in .gpu-check/ (must stay under 50 MiB)|'
