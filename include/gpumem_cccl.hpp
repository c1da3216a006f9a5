/* gpumem_cccl.hpp: gpumem and CCCL's memory resources, both ways (CUDA C++; needs gpumem.hpp
 * and CCCL's <cuda/memory_resource>, which CUDA 12 and 13 ship and RAPIDS bundles).
 *
 * CCCL's memory-resource concepts are what RMM-based libraries (libcudf, RAFT, cuML, ...)
 * take for memory: rmm::device_async_resource_ref is a cuda::mr resource ref with the
 * cuda::mr::device_accessible property. This header makes the two meet:
 *   gpumem::cccl_resource      a CCCL resource over a gpumem resource: anything that takes
 *                              a CCCL resource ref (rmm::device_buffer, rmm::device_uvector,
 *                              rmm::mr::set_current_device_resource, a library's API)
 *                              allocates from gpumem;
 *   gpumem::from_cccl(r)       a gpumem resource over any CCCL resource (or resource ref),
 *                              e.g. RMM's cuda_memory_resource, to compose gpumem over it:
 *                              gpumem::resource::pool(gpumem::from_cccl(ref)).
 *
 * CCCL versions. CCCL 3.1 renamed the concepts and their members; both sets are served,
 * chosen by CCCL_VERSION (GPUMEM_CCCL_STREAM_FIRST says which):
 *   CCCL >= 3.1 (RMM 26.10 bundles 3.5):
 *     cuda::mr::resource: allocate(stream, bytes, alignment), deallocate(stream, ptr, bytes,
 *     alignment), allocate_sync(bytes, alignment), deallocate_sync(ptr, bytes, alignment);
 *     refs cuda::mr::resource_ref<...> (stream-ordered) and synchronous_resource_ref<...>.
 *   CCCL 2.x and 3.0 (CUDA 12's, CUDA 13.0's):
 *     cuda::mr::async_resource: allocate_async(bytes, alignment, stream),
 *     deallocate_async(ptr, bytes, alignment, stream), allocate(bytes, alignment),
 *     deallocate(ptr, bytes, alignment); refs async_resource_ref<...> and resource_ref<...>.
 *     These need LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE, which this header defines
 *     where it is not: include it before any other CCCL header, or define the macro for the
 *     whole program.
 * gpumem::cccl_device_resource_ref names the stream-ordered device ref of either version.
 *
 * Ownership. A cccl_resource holds a reference to its gpumem resource (a gpumem::resource
 * handle): copies share it, so a copy stored by RMM (set_current_device_resource keeps one)
 * keeps the resource alive. from_cccl keeps a copy of what it is given: a resource is copied
 * (an RMM resource such as cuda_memory_resource, or a shared one), a resource ref is not, so
 * the resource behind a ref must outlive the gpumem resource built on it.
 *
 * Errors. cccl_resource's allocations throw as gpumem.hpp does: gpumem::out_of_memory (a
 * std::bad_alloc, so RMM's callers see the std::bad_alloc they expect) or gpumem::error;
 * its deallocations never throw (CCCL and RMM call them from destructors): a failed one (a
 * pointer or size the resource did not give) leaves the memory allocated, never freed twice,
 * and gpumem_last_error_message() says why. The other way, what a CCCL resource throws
 * becomes a gpumem status with the exception's text as the message: a std::bad_alloc (RMM's
 * rmm::out_of_memory and rmm::bad_alloc are ones) GPUMEM_ERR_OUT_OF_MEMORY, anything else
 * GPUMEM_ERR_CALLBACK; nothing is thrown through gpumem's C code. */
#ifndef GPUMEM_CCCL_HPP
#define GPUMEM_CCCL_HPP

#include "gpumem.hpp"

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#if !defined(CCCL_VERSION)
#error "gpumem_cccl.hpp: <cuda/memory_resource> did not define CCCL_VERSION"
#endif

/* 1 where CCCL's resources take the stream first and allocate() is stream-ordered (3.1 on),
 * 0 where allocate_async() is (2.x, 3.0). */
#if CCCL_VERSION >= 3001000
#define GPUMEM_CCCL_STREAM_FIRST 1
#else
#define GPUMEM_CCCL_STREAM_FIRST 0
#endif

namespace gpumem {

#if GPUMEM_CCCL_STREAM_FIRST
using cccl_device_resource_ref = cuda::mr::resource_ref<cuda::mr::device_accessible>;
#else
using cccl_device_resource_ref = cuda::mr::async_resource_ref<cuda::mr::device_accessible>;
#endif

/* ---------------------------------------------------------------------------------------
 * cccl_resource: gpumem inside CCCL and RMM
 * ------------------------------------------------------------------------------------- */

/* A CCCL memory resource (cuda::mr::resource with cuda::mr::device_accessible, or
 * async_resource before CCCL 3.1) over a gpumem resource. Copyable; copies share the gpumem
 * resource; two are equal when they use the same one (memory from one may be freed by the
 * other). Default-constructed, it uses the current device's gpumem resource as it is then.
 *
 * Stream order: the stream-ordered calls are gpumem_allocate_aligned and
 * gpumem_deallocate_aligned on the stream given; the synchronous ones use the legacy default
 * stream, and the synchronous allocation waits for it, so that the memory is usable at once
 * from any stream and the host. Alignments below 256 give 256 (gpumem's least); a
 * deallocation must pass the size (and alignment) of its allocation, as CCCL requires.
 *
 * The memory gpumem gives is device memory whatever the resource (a managed or host resource
 * is also device-accessible), so only device_accessible is declared. */
class cccl_resource {
public:
  /* The current device's gpumem resource (throws gpumem::error where there is none). */
  cccl_resource() : mr_(get_current_device_resource()) {}
  /* `mr` (throws gpumem::error, GPUMEM_ERR_INVALID_ARGUMENT, for an empty handle). */
  explicit cccl_resource(resource mr) : mr_(std::move(mr)) {
    if (!mr_)
      throw error(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem::cccl_resource: an empty resource handle");
  }
  /* Written out, not defaulted: nvcc would make defaulted ones __host__ __device__ where
   * CCCL's type erasure copies the resource, and the handle's copy is host code. */
  cccl_resource(const cccl_resource &other) noexcept : mr_(other.mr_) {}
  cccl_resource(cccl_resource &&other) noexcept : mr_(std::move(other.mr_)) {}
  cccl_resource &operator=(const cccl_resource &other) noexcept {
    mr_ = other.mr_;
    return *this;
  }
  cccl_resource &operator=(cccl_resource &&other) noexcept {
    mr_ = std::move(other.mr_);
    return *this;
  }
  ~cccl_resource() {}

#if GPUMEM_CCCL_STREAM_FIRST
  void *allocate(cuda::stream_ref stream, std::size_t bytes,
                 std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) {
    return mr_.allocate(bytes, stream_view{stream.get()}, alignment);
  }
  void deallocate(cuda::stream_ref stream, void *ptr, std::size_t bytes,
                  std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) noexcept {
    gpumem_deallocate_aligned(mr_.get(), ptr, bytes, alignment, stream.get());
  }
  void *allocate_sync(std::size_t bytes, std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) {
    return allocate_synchronously(bytes, alignment);
  }
  void deallocate_sync(void *ptr, std::size_t bytes,
                       std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) noexcept {
    gpumem_deallocate_aligned(mr_.get(), ptr, bytes, alignment, nullptr);
  }
#else
  void *allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    return mr_.allocate(bytes, stream_view{stream.get()}, alignment);
  }
  void deallocate_async(void *ptr, std::size_t bytes, std::size_t alignment,
                        cuda::stream_ref stream) noexcept {
    gpumem_deallocate_aligned(mr_.get(), ptr, bytes, alignment, stream.get());
  }
  void *allocate(std::size_t bytes, std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) {
    return allocate_synchronously(bytes, alignment);
  }
  void deallocate(void *ptr, std::size_t bytes,
                  std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) noexcept {
    gpumem_deallocate_aligned(mr_.get(), ptr, bytes, alignment, nullptr);
  }
#endif

  /* The gpumem resource (for its statistics, report, trim, ...). */
  const resource &get() const noexcept {
    return mr_;
  }

  friend bool operator==(const cccl_resource &a, const cccl_resource &b) noexcept {
    return a.mr_ == b.mr_;
  }
  friend bool operator!=(const cccl_resource &a, const cccl_resource &b) noexcept {
    return a.mr_ != b.mr_;
  }
  friend constexpr void get_property(const cccl_resource &, cuda::mr::device_accessible) noexcept {}

private:
  void *allocate_synchronously(std::size_t bytes, std::size_t alignment) {
    void *ptr = mr_.allocate(bytes, stream_view{}, alignment);
    gpumem_status status = gpumem_stream_synchronize(nullptr);
    if (status != GPUMEM_OK) {
      detail::pending_failure failure = detail::capture(status);
      gpumem_deallocate_aligned(mr_.get(), ptr, bytes, alignment, nullptr);
      detail::raise(failure);
    }
    return ptr;
  }

  resource mr_;
};

#if GPUMEM_CCCL_STREAM_FIRST
static_assert(cuda::mr::resource_with<cccl_resource, cuda::mr::device_accessible>,
              "gpumem::cccl_resource must be a CCCL resource with device_accessible");
#else
static_assert(cuda::mr::async_resource_with<cccl_resource, cuda::mr::device_accessible>,
              "gpumem::cccl_resource must be a CCCL async_resource with device_accessible");
#endif

/* ---------------------------------------------------------------------------------------
 * from_cccl: CCCL (and RMM) resources under gpumem
 * ------------------------------------------------------------------------------------- */

/* What from_cccl's resource is: zero means default. */
struct cccl_options {
  /* The resource's name (gpumem_resource_name, messages, reports); nullptr: "cccl". */
  const char *name = nullptr;
  /* The device the memory is for; GPUMEM_CURRENT_DEVICE: the current one. */
  int device = GPUMEM_CURRENT_DEVICE;
  /* The kind of memory the CCCL resource gives (GPUMEM_MEMORY_DEVICE: device memory). */
  gpumem_memory_kind memory = GPUMEM_MEMORY_DEVICE;
  /* true: the resource's frees are synchronous (a free is reusable at once), as for a
   * resource over cudaMalloc/cudaFree; false: stream-ordered, as for a pool. Only what
   * gpumem's reports say of the resource. */
  bool synchronous = false;
};

namespace detail {
/* The CCCL resource (or ref) from_cccl holds, and the user-resource functions that call it.
 * Each catches everything: an exception must not cross gpumem's C code. */
template <typename Resource> struct cccl_upstream {
  Resource res;

  static gpumem_status fail(const char *what, gpumem_status status) noexcept {
    gpumem_set_error_message(what);
    return status;
  }
  /* Runs `call`, a call into the CCCL resource, and turns what it throws into a status with
   * its text: gpumem's own failures (gpumem under CCCL under gpumem) keep their status, a
   * std::bad_alloc gets `on_bad_alloc`, anything else GPUMEM_ERR_CALLBACK. */
  template <typename Call>
  static gpumem_status guarded(Call call, gpumem_status on_bad_alloc) noexcept {
    try {
      call();
      return GPUMEM_OK;
    } catch (const failure &f) {
      return fail(f.message(), f.status());
    } catch (const std::bad_alloc &e) {
      return fail(e.what(), on_bad_alloc);
    } catch (const std::exception &e) {
      return fail(e.what(), GPUMEM_ERR_CALLBACK);
    } catch (...) {
      return fail("a CCCL resource threw something other than a std::exception",
                  GPUMEM_ERR_CALLBACK);
    }
  }
  static gpumem_status allocate(void *state, std::size_t bytes, std::size_t alignment,
                                gpumem_stream stream, void **ptr) noexcept {
    auto *self = static_cast<cccl_upstream *>(state);
    return guarded(
        [&] {
#if GPUMEM_CCCL_STREAM_FIRST
          *ptr = self->res.allocate(cuda::stream_ref{stream}, bytes, alignment);
#else
          *ptr = self->res.allocate_async(bytes, alignment, cuda::stream_ref{stream});
#endif
        },
        GPUMEM_ERR_OUT_OF_MEMORY);
  }
  static gpumem_status deallocate(void *state, void *ptr, std::size_t bytes, std::size_t alignment,
                                  gpumem_stream stream) noexcept {
    auto *self = static_cast<cccl_upstream *>(state);
    return guarded(
        [&] {
#if GPUMEM_CCCL_STREAM_FIRST
          self->res.deallocate(cuda::stream_ref{stream}, ptr, bytes, alignment);
#else
          self->res.deallocate_async(ptr, bytes, alignment, cuda::stream_ref{stream});
#endif
        },
        GPUMEM_ERR_CALLBACK); /* a free's bad_alloc is no shortage */
  }
  static void destroy(void *state) noexcept {
    delete static_cast<cccl_upstream *>(state);
  }
};
} // namespace detail

/* A gpumem resource over a CCCL resource or resource ref (any type that satisfies
 * cuda::mr::resource_with<R, device_accessible>, or async_resource_with before CCCL 3.1):
 * gpumem's allocations of it call its stream-ordered allocate and deallocate on the same
 * stream, with the same size and alignment. Compose over it as over any resource:
 *   gpumem::resource::pool(gpumem::from_cccl(rmm::mr::cuda_memory_resource{}))
 * gpumem keeps its contract around it (include/gpumem.h, "Resources users write"): it
 * checks arguments first, files every pointer, refuses a double or foreign free, and its
 * live figures are its own. `r` is copied (see the header's opening comment on refs). Throws
 * gpumem::error (no device for GPUMEM_CURRENT_DEVICE, bad options) or std::bad_alloc. */
template <typename R> resource from_cccl(R r, const cccl_options &opts = {}) {
#if GPUMEM_CCCL_STREAM_FIRST
  static_assert(cuda::mr::resource_with<R, cuda::mr::device_accessible>,
                "gpumem::from_cccl needs a cuda::mr::resource with device_accessible");
#else
  static_assert(cuda::mr::async_resource_with<R, cuda::mr::device_accessible>,
                "gpumem::from_cccl needs a cuda::mr::async_resource with device_accessible");
#endif
  using upstream = detail::cccl_upstream<R>;
  std::unique_ptr<upstream> state(new upstream{std::move(r)});
  gpumem_user_resource_ops ops{};
  ops.size = sizeof ops;
  ops.version = GPUMEM_USER_RESOURCE_OPS_VERSION;
  ops.allocate = &upstream::allocate;
  ops.deallocate = &upstream::deallocate;
  ops.destroy = &upstream::destroy;
  ops.memory = opts.memory;
  ops.stream_ordered = opts.synchronous ? 0 : 1;
  ops.name = opts.name ? opts.name : "cccl";
  gpumem_resource *mr = nullptr;
  check(gpumem_user_resource_create(opts.device, &ops, state.get(), &mr));
  state.release(); /* the resource owns it now: destroy() deletes it */
  return resource::adopt(mr);
}

} // namespace gpumem

#endif /* GPUMEM_CCCL_HPP */
