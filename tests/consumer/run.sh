#!/usr/bin/env bash
# run.sh: the downstream-consumer test. It installs a built gpumem into a scratch prefix,
# builds tests/consumer/main.c against that install three ways (find_package with
# gpumem::gpumem and gpumem::gpumem_static, and pkg-config), and runs the three programs on
# the backend GPUMEM_DEVICE selects. Building against the install, not the build tree, is
# the point: it catches a header, library, CMake package or .pc file that is missing from
# the install or points at the wrong place.
#
# Usage: run.sh GPUMEM_BUILD_DIR GPUMEM_SOURCE_DIR SCRATCH_DIR
# Environment: CMAKE and CC (default cmake, cc) to use the same tools as gpumem's build;
# GPUMEM_CONSUMER_FLAGS, compiler and linker flags the consumer needs to link against this
# build (the sanitizer flags of a GPUMEM_SANITIZE build, whose libraries need the runtime).
# Exit status: 0 when all three pass, 77 when all three skip (no GPU), else 1.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 GPUMEM_BUILD_DIR GPUMEM_SOURCE_DIR SCRATCH_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
mkdir -p "$3"
scratch=$(cd "$3" && pwd)
prefix=$scratch/prefix
consumer_src=$source/tests/consumer
cmake=${CMAKE:-cmake}
cc=${CC:-cc}
extra_flags=${GPUMEM_CONSUMER_FLAGS:-}

die() {
  echo "consumer test: $*" >&2
  exit 1
}

# A fresh prefix each run, so a file an earlier install left behind cannot hide one this
# install lacks.
rm -rf "$prefix" "$scratch/cmake-build" "$scratch/pkgconfig-build"
echo "== install $build into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$scratch/install.log" ||
  { cat "$scratch/install.log" >&2; die "cmake --install failed"; }

# GNUInstallDirs picks lib, lib64 or lib/<multiarch>; find the one the install used.
pcfile=$(find "$prefix" -name gpumem.pc -path '*/pkgconfig/*' | head -n 1)
[[ -n $pcfile ]] || die "the install has no gpumem.pc under $prefix"
libdir=$(dirname "$(dirname "$pcfile")")
[[ -f $prefix/include/gpumem.h ]] || die "the install has no include/gpumem.h"
for header in gpumem.hpp gpumem_thrust.hpp gpumem_cccl.hpp; do # the C++ layer's, header-only
  [[ -f $prefix/include/$header ]] || die "the install has no include/$header"
done
[[ -f $libdir/cmake/gpumem/gpumemConfig.cmake ]] ||
  die "the install has no $libdir/cmake/gpumem/gpumemConfig.cmake"
echo "   libdir: ${libdir#"$prefix"/}"

echo "== find_package(gpumem): consumer_cmake (shared), consumer_static"
"$cmake" -S "$consumer_src" -B "$scratch/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$extra_flags" >"$scratch/cmake-configure.log" 2>&1 ||
  { cat "$scratch/cmake-configure.log" >&2; die "configuring the consumer project failed"; }
"$cmake" --build "$scratch/cmake-build" >"$scratch/cmake-build.log" 2>&1 ||
  { cat "$scratch/cmake-build.log" >&2; die "building the consumer project failed"; }
# The package must have resolved to this install, not to some other gpumem on the system.
found=$(sed -n 's/^gpumem_DIR:PATH=//p' "$scratch/cmake-build/CMakeCache.txt")
[[ $found == "$libdir/cmake/gpumem" ]] ||
  die "find_package(gpumem) found $found, not the scratch install $libdir/cmake/gpumem"

echo "== pkg-config gpumem: consumer_pkgconfig"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs gpumem) || die "pkg-config --cflags --libs gpumem failed"
echo "   flags: $flags"
# The .pc file must point into the prefix it was installed to, wherever that is: a file
# that names the configure-time prefix builds against some other copy, or not at all.
pc_includedir=$(pkg-config --variable=includedir gpumem)
pc_libdir=$(pkg-config --variable=libdir gpumem)
[[ -f $pc_includedir/gpumem.h ]] ||
  die "gpumem.pc gives includedir=$pc_includedir, which has no gpumem.h (installed to $prefix)"
[[ $(cd "$pc_includedir" && pwd -P) == $(cd "$prefix/include" && pwd -P) ]] ||
  die "gpumem.pc gives includedir=$pc_includedir, not the install's $prefix/include"
[[ -d $pc_libdir && $(cd "$pc_libdir" && pwd -P) == $(cd "$libdir" && pwd -P) ]] ||
  die "gpumem.pc gives libdir=$pc_libdir, not the install's $libdir"
# The .pc file's version is the installed header's (the version's one source).
header_version=$(awk '/^#define GPUMEM_VERSION_(MAJOR|MINOR|PATCH) / { v = v sep $3; sep = "." }
  END { print v }' "$prefix/include/gpumem.h")
pc_version=$(pkg-config --modversion gpumem)
[[ $pc_version == "$header_version" ]] ||
  die "gpumem.pc gives version $pc_version, the installed gpumem.h $header_version"
mkdir -p "$scratch/pkgconfig-build"
# $flags and $extra_flags are split into words on purpose: they are lists of options.
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra_flags "$consumer_src/main.c" $flags \
  -o "$scratch/pkgconfig-build/consumer_pkgconfig" ||
  die "cc main.c \$(pkg-config --cflags --libs gpumem) failed"

# CMake gives its programs an rpath to the imported library; the pkg-config one finds the
# shared library the way a user's program would, through LD_LIBRARY_PATH.
programs=(
  "$scratch/cmake-build/consumer_cmake"
  "$scratch/cmake-build/consumer_static"
  "$scratch/pkgconfig-build/consumer_pkgconfig"
)
passed=0
skipped=0
for program in "${programs[@]}"; do
  name=$(basename "$program")
  echo "== $name (GPUMEM_DEVICE=${GPUMEM_DEVICE:-})"
  # The shared programs must load the installed library, never the build tree's.
  if [[ $name != consumer_static ]]; then
    lib=$(LD_LIBRARY_PATH=$libdir ldd "$program" | awk '/libgpumem\.so/ { print $3 }')
    [[ $lib == "$libdir"/* ]] || die "$name loads libgpumem from '$lib', not from $libdir"
  elif ldd "$program" | grep -q 'libgpumem\.so'; then
    die "consumer_static is linked to the shared libgpumem"
  fi
  status=0
  LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$program" || status=$?
  case $status in
  0) passed=$((passed + 1)) ;;
  77) skipped=$((skipped + 1)) ;;
  *) die "$name exited with status $status" ;;
  esac
done

echo "== consumer: $passed passed, $skipped skipped"
if [[ $skipped -eq ${#programs[@]} ]]; then
  exit 77
fi
if [[ $skipped -ne 0 ]]; then
  die "some programs skipped and others ran: they must agree on whether there is a GPU"
fi
