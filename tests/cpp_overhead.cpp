/* cpp_overhead.cpp: what the C++ layer (include/gpumem.hpp) costs over the C calls it wraps,
 * measured in one process on one resource: an allocate/free pair through
 * gpumem_allocate_aligned/gpumem_deallocate_aligned against resource::allocate/deallocate, a C
 * buffer (gpumem_buffer_create/destroy) against a device_buffer and a device_uvector, and a
 * gpumem_buffer_resize against device_buffer::resize. The variants run interleaved, each
 * pass starting at another one, each pass timed as a whole, and each figure is the fastest of the
 * passes (the least disturbed by the rest of the machine), in nanoseconds per pair, with its ratio
 * to its C reference and to the bare C allocate/free pair (a container adds its reference to the
 * resource there).
 *
 * Usage: test_cpp_overhead [PAIRS_PER_PASS [PASSES [SPEC]]] (default 200000, 7, "pool(cuda)").
 * One JSON line per variant. Not a timed test: CTest runs it small, to prove it runs and
 * prints its fields; the figures are for docs (README "C++", docs/gpu-runs.md on a GPU). */
#include "gpumem.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

/* Sizes cycled through (a small, mixed workload: the pool's fast path). */
const std::size_t sizes[8] = {256, 1000, 4096, 512, 65536, 2048, 300, 16384};

/* A value the optimizer must believe is used. */
volatile std::uintptr_t sink;

template <typename Body> double time_pass(std::size_t pairs, Body body) {
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < pairs; i++)
    body(sizes[i & 7]);
  auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / pairs;
}

struct variant {
  const char *name;
  const char *reference; /* the C variant it is compared with; nullptr for a C one */
  std::function<double(std::size_t)> run; /* ns per pair over that many pairs */
  double best = 1e300;
};

} // namespace

int main(int argc, char **argv) {
  std::size_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
  int passes = argc > 2 ? std::atoi(argv[2]) : 7;
  const char *spec = argc > 3 ? argv[3] : "pool(cuda)";
  if (pairs == 0 || passes <= 0) {
    std::fprintf(stderr, "usage: %s [PAIRS_PER_PASS [PASSES [SPEC]]]\n", argv[0]);
    return 2;
  }
  try {
    gpumem::resource mr = gpumem::resource::from_spec(spec);
    gpumem::stream stream;
    gpumem_resource *c_mr = mr.get();
    gpumem_stream c_stream = stream.value();

    gpumem_buffer *c_buf = nullptr;
    gpumem::check(gpumem_buffer_create(0, c_stream, c_mr, &c_buf));
    gpumem::device_buffer cpp_buf(0, stream, mr);

    /* The C reference of resource::allocate is the call it makes (the aligned one). */
    std::vector<variant> variants = {
        {"c:allocate+deallocate", nullptr,
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             void *p = nullptr;
             if (gpumem_allocate_aligned(c_mr, bytes, 256, c_stream, &p) != GPUMEM_OK)
               std::abort();
             sink = reinterpret_cast<std::uintptr_t>(p);
             if (gpumem_deallocate_aligned(c_mr, p, bytes, 256, c_stream) != GPUMEM_OK)
               std::abort();
           });
         }},
        {"cpp:resource.allocate+deallocate", "c:allocate+deallocate",
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             void *p = mr.allocate(bytes, stream);
             sink = reinterpret_cast<std::uintptr_t>(p);
             mr.deallocate(p, bytes, stream);
           });
         }},
        {"c:buffer_create+destroy", nullptr,
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             gpumem_buffer *b = nullptr;
             if (gpumem_buffer_create(bytes, c_stream, c_mr, &b) != GPUMEM_OK)
               std::abort();
             sink = reinterpret_cast<std::uintptr_t>(gpumem_buffer_data(b));
             gpumem_buffer_destroy(b);
           });
         }},
        {"cpp:device_buffer", "c:buffer_create+destroy",
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             gpumem::device_buffer b(bytes, stream, mr);
             sink = reinterpret_cast<std::uintptr_t>(b.data());
           });
         }},
        {"cpp:device_uvector<float>", "c:buffer_create+destroy",
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             gpumem::device_uvector<float> v(bytes / sizeof(float), stream, mr);
             sink = reinterpret_cast<std::uintptr_t>(v.data());
           });
         }},
        /* Growing past the capacity (an allocation), then back to 0 bytes (a free). */
        {"c:buffer_resize", nullptr,
         [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             if (gpumem_buffer_resize(c_buf, bytes, c_stream) != GPUMEM_OK ||
                 gpumem_buffer_resize(c_buf, 0, c_stream) != GPUMEM_OK ||
                 gpumem_buffer_shrink_to_fit(c_buf, c_stream) != GPUMEM_OK)
               std::abort();
           });
         }},
        {"cpp:device_buffer.resize", "c:buffer_resize", [&](std::size_t n) {
           return time_pass(n, [&](std::size_t bytes) {
             cpp_buf.resize(bytes, stream);
             cpp_buf.resize(0, stream);
             cpp_buf.shrink_to_fit(stream);
           });
         }}};

    /* Each pass starts at another variant, so that none always runs first (cold) or right
     * after the same neighbour. */
    for (int pass = 0; pass < passes; pass++) {
      for (std::size_t k = 0; k < variants.size(); k++) {
        variant &v = variants[(pass + k) % variants.size()];
        v.best = std::min(v.best, v.run(pairs));
      }
      stream.synchronize(); /* let the simulated device's work run */
    }
    gpumem::check(gpumem_buffer_destroy(c_buf));

    for (const variant &v : variants) {
      std::printf("{\"bench\":\"cpp_overhead\",\"variant\":\"%s\",\"resource\":\"%s\","
                  "\"device\":\"%s\",\"pairs\":%zu,\"passes\":%d,\"ns_per_pair_min\":%.2f",
                  v.name, spec, gpumem_backend_name(), pairs, passes, v.best);
      if (v.reference) {
        for (const variant &ref : variants)
          if (std::string(ref.name) == v.reference)
            std::printf(",\"reference\":\"%s\",\"ratio\":%.3f", ref.name, v.best / ref.best);
        /* and against the bare C pair, which no container can beat */
        std::printf(",\"ratio_to_c_allocate\":%.3f", v.best / variants[0].best);
      }
      std::printf("}\n");
    }
  } catch (const gpumem::failure &f) {
    std::fprintf(stderr, "cpp_overhead: %s: %s\n", f.status_name(), f.message());
    return 1;
  }
  return 0;
}
