/* gpumem_thrust.hpp: Thrust over gpumem (CUDA C++ under nvcc; needs gpumem.hpp and Thrust).
 *
 * Two things, as RMM's thrust_allocator and exec_policy:
 *   gpumem::thrust_allocator<T>  an allocator for thrust::device_vector<T, A> and anything
 *                                else of Thrust that takes one: it allocates from a gpumem
 *                                resource on a stream;
 *   gpumem::exec_policy(stream)  a Thrust execution policy on `stream` whose temporary memory
 *                                (the scratch space of reduce, sort, scan, ...) comes from
 *                                gpumem on that stream, instead of cudaMalloc.
 *
 * Ownership: the allocator, like every container of gpumem.hpp, holds a reference to its
 * resource (copies share it), so the resource outlives every vector and every algorithm
 * call that uses it. Stream order: memory is allocated and freed on the allocator's stream;
 * the policy's algorithms run on the same stream, so their scratch space is freed once their
 * kernels are done. A device_vector over the allocator frees its memory on that stream too:
 * work of other streams on it must be done first (an event), as in CUDA. Throws:
 * allocate throws gpumem::out_of_memory (a std::bad_alloc, which Thrust passes on) or
 * gpumem::error; deallocate never throws. */
#ifndef GPUMEM_THRUST_HPP
#define GPUMEM_THRUST_HPP

#include "gpumem.hpp"

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/system/cuda/execution_policy.h>

namespace gpumem {

/* A Thrust allocator of T over a gpumem resource and a stream; default-constructed, over the
 * current device's resource on the default stream. Memory is aligned to max(alignof(T), 256).
 * Two allocators are equal when they use the same resource and stream (memory from one may
 * be freed by the other). */
template <typename T> class thrust_allocator : public thrust::device_malloc_allocator<T> {
public:
  using base = thrust::device_malloc_allocator<T>;
  using pointer = typename base::pointer;
  using size_type = typename base::size_type;
  template <typename U> struct rebind { using other = thrust_allocator<U>; };

  static constexpr std::size_t alignment = alignof(T) > GPUMEM_DEFAULT_ALIGNMENT
                                               ? alignof(T)
                                               : GPUMEM_DEFAULT_ALIGNMENT;

  thrust_allocator() : mr_(get_current_device_resource()) {}
  explicit thrust_allocator(stream_view stream)
      : stream_(stream), mr_(get_current_device_resource()) {}
  thrust_allocator(stream_view stream, resource mr) : stream_(stream), mr_(std::move(mr)) {}
  template <typename U>
  thrust_allocator(const thrust_allocator<U> &other)
      : stream_(other.stream()), mr_(other.memory_resource()) {}

  /* `count` elements on the allocator's stream. */
  pointer allocate(size_type count) {
    void *ptr = mr_.allocate(detail::bytes_of(count, sizeof(T)), stream_, alignment);
    return thrust::device_pointer_cast(static_cast<T *>(ptr));
  }
  /* Frees on the allocator's stream; a failure (a pointer the resource did not give) is
   * dropped, as a destructor would. */
  void deallocate(pointer ptr, size_type count) noexcept {
    gpumem_deallocate_aligned(mr_.get(), thrust::raw_pointer_cast(ptr), count * sizeof(T),
                              alignment, stream_.value());
  }

  stream_view stream() const noexcept { return stream_; }
  const resource &memory_resource() const noexcept { return mr_; }

  friend bool operator==(const thrust_allocator &a, const thrust_allocator &b) noexcept {
    return a.mr_ == b.mr_ && a.stream_ == b.stream_;
  }
  friend bool operator!=(const thrust_allocator &a, const thrust_allocator &b) noexcept {
    return !(a == b);
  }

private:
  stream_view stream_;
  resource mr_;
};

/* Thrust's CUDA policy on `stream` with its temporary memory from mr (default: the current
 * device's resource) on that stream: thrust::reduce(gpumem::exec_policy(stream), ...). The
 * algorithm waits for the stream where Thrust says it does. */
inline auto exec_policy(stream_view stream, resource mr) {
  return thrust::cuda::par(thrust_allocator<char>(stream, std::move(mr))).on(stream.value());
}
inline auto exec_policy(stream_view stream = {}) {
  return exec_policy(stream, get_current_device_resource());
}
/* As exec_policy, without the synchronizations Thrust may skip (thrust::cuda::par_nosync). */
inline auto exec_policy_nosync(stream_view stream, resource mr) {
  return thrust::cuda::par_nosync(thrust_allocator<char>(stream, std::move(mr))).on(stream.value());
}
inline auto exec_policy_nosync(stream_view stream = {}) {
  return exec_policy_nosync(stream, get_current_device_resource());
}

} // namespace gpumem

#endif /* GPUMEM_THRUST_HPP */
