"""The resource spec grammar from Python (gpumem.mr.from_spec): what each spec builds, sizes
with units and percentages, booleans and words, specs that round-trip through .spec, and
errors that quote the spec and put a caret under the offending character."""
import pytest

import gpumem
from gpumem import mr

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize("spec, built", [
    ("cuda", "cuda"),
    ("managed(prefetch=true)", "managed(prefetch=true)"),
    ("managed(read_mostly=true, preferred_location=host)",
     "managed(prefetch=false, read_mostly=true, preferred_location=host)"),
    ("async(release_threshold=1GiB, ipc=posix_fd)",
     "async(release_threshold=1073741824, initial=0, ipc=posix_fd)"),
    ("pinned_host(mapped=true)", "pinned_host(mapped=true, write_combined=false)"),
    ("vmm(reserve=1GiB)", "vmm(reserve=1073741824, piece=33554432)"),
    ("vmm(reserve=1GiB, piece=2MiB)", "vmm(reserve=1073741824, piece=2097152)"),
    ("pool(cuda, initial=1MiB)", "pool(cuda, initial=1048576, max=0)"),
    ("arena(cuda, size=8MiB, superblock=1MiB)", "arena(cuda, size=8388608, max=0, superblock=1048576)"),
    ("fixed_size(managed, block=64K, prealloc=4)",
     "fixed_size(managed(prefetch=false), block=65536, prealloc=4)"),
    ("binning(pool(vmm(reserve=1GiB)), min=10, max=20)",
     "binning(pool(vmm(reserve=1073741824, piece=33554432), initial=0, max=0), min=10, max=20)"),
    ("faulty(cuda, fail_every=2, status=out_of_memory)",
     "faulty(cuda, fail_at=0, fail_every=2, status=out_of_memory)"),
    (" pool ( cuda , initial = 1MiB ) ", "pool(cuda, initial=1048576, max=0)"),
])
def test_what_each_spec_builds(spec, built):
    resource = mr.from_spec(spec)
    assert resource.spec == built
    assert mr.from_spec(resource.spec).spec == built, "the spec builds an equal resource"
    ptr = resource.allocate(4096)
    assert resource.live_count == 1
    resource.deallocate(ptr, 4096)


@pytest.mark.parametrize("text, size", [
    ("4096", 4096), ("100B", 100), ("1K", KiB), ("1KiB", KiB), ("1KB", 1000), ("3M", 3 * MiB),
    ("3MB", 3 * 10**6), ("2G", 2 * GiB), ("2GB", 2 * 10**9), ("3T", 3 * TiB),
    ("1.5MiB", 3 * MiB // 2),
])
def test_size_units(text, size):
    resource = mr.from_spec(f"async(release_threshold={text})")
    assert resource.spec.startswith(f"async(release_threshold={size},")
    assert gpumem._lib.parse_size(text) == size


def test_percentages_are_of_the_devices_total_memory():
    total = mr.available_device_memory(0)[1]
    resource = mr.from_spec("pool(cuda, initial=1MiB, max=50%)")
    assert resource.spec == f"pool(cuda, initial=1048576, max={total // 2})"
    assert gpumem._lib.parse_size("25%") == total // 4


def test_a_spec_for_another_device(second_device):
    resource = mr.from_spec("pool(cuda, initial=1MiB)", device=second_device)
    assert resource.device == second_device
    assert resource.upstream.device == second_device


def test_a_faulty_status_picks_the_exception():
    with pytest.raises(gpumem.OutOfMemoryError, match="failure injected by the faulty adaptor"):
        mr.from_spec("faulty(cuda, fail_at=1, status=out_of_memory)").allocate(10)
    with pytest.raises(gpumem.GpumemError, match="^GPUMEM_ERR_CUDA: "):
        mr.from_spec("faulty(cuda, fail_at=1, status=cuda)").allocate(10)
    with pytest.raises(gpumem.GpumemError, match="^GPUMEM_ERR_INJECTED_FAULT: "):
        mr.from_spec("faulty(cuda, fail_at=1)").allocate(10)


@pytest.mark.parametrize("spec, complaint, column", [
    ("faulty(cuda, fail_al=3)",
     "unknown parameter 'fail_al' of 'faulty' (known: fail_at, fail_every, status)", 13),
    ("nosuch", "unknown resource 'nosuch' (known: cuda, managed, async,", 0),
    ("POOL(cuda)", "unknown resource 'POOL'", 0),
    ("pool(cuda", "unbalanced parentheses: '(' after 'pool' is not closed", 9),
    ("pool(cuda, initial=12XB)", "bad value for 'initial' of 'pool' (expected a size", 19),
    ("pool(cuda, initial=-5)", "bad value for 'initial' of 'pool'", 19),
    ("pool(cuda, initial=200%)", "bad value for 'initial' of 'pool'", 19),
    ("pool(cuda) trailing", "trailing text after the spec", 11),
    ("", "empty spec", 0),
    ("pool(cuda, cuda)", "two upstreams for 'pool'", 11),
    ("pool()", "empty parentheses after 'pool'", 5),
    ("pool(initial=1MiB)", "missing upstream for 'pool'", 0),
    ("pool(cuda,, max=1)", "expected a resource or key=value in the arguments of 'pool'", 10),
    ("managed(prefetch=maybe)", "bad value for 'prefetch' of 'managed' (expected true or false)", 17),
    ("faulty(cuda, status=bogus)",
     "bad value for 'status' of 'faulty' (expected one of: injected, out_of_memory, cuda)", 20),
    ("system(x=1)", "unknown parameter 'x' of 'system' (it takes none)", 7),
    ("binning(cuda, min=4294967304)",
     "bad value for 'min' of 'binning' (expected a count from 8 to 40)", 18),
])
def test_a_bad_spec_quotes_it_and_points_at_the_mistake(spec, complaint, column):
    with pytest.raises(gpumem.InvalidArgumentError) as failure:
        mr.from_spec(spec)
    message, quoted, caret = str(failure.value).splitlines()
    assert message.startswith("GPUMEM_ERR_INVALID_ARGUMENT: invalid resource spec: " + complaint)
    assert quoted == "  " + spec
    assert caret == " " * (2 + column) + "^"


@pytest.mark.parametrize("spec, complaint", [
    ("pool(cuda, initial=1GiB, max=1MiB)",
     "building 'pool': gpumem_pool_create: initial size 1073741824 exceeds the maximum size 1048576"),
    ("binning(cuda, min=30, max=10)", "building 'binning': gpumem_binning_create: bin exponents 30 to 10"),
])
def test_a_spec_that_parses_but_cannot_be_built_says_which_part_failed(spec, complaint):
    with pytest.raises(gpumem.InvalidArgumentError) as failure:
        mr.from_spec(spec)
    assert str(failure.value).startswith(
        f"GPUMEM_ERR_INVALID_ARGUMENT: resource spec '{spec}': {complaint}")


def test_parse_size_refuses_what_is_not_a_size():
    for text in ("", "MiB", "12 parsecs", "1GiBs", "-1"):
        with pytest.raises(gpumem.InvalidArgumentError, match="Could not parse .* as a size"):
            gpumem._lib.parse_size(text)


def test_the_deepest_chain_is_described_whole():
    spec = "faulty(" * 15 + "cuda" + ", fail_every=7)" * 15
    described = mr.from_spec(spec).spec
    assert len(described) > 512
    assert described.count("faulty(") == 15 and described.endswith("status=injected)")
    assert mr.from_spec(described).spec == described
