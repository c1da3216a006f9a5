/* gpumem.hpp: gpumem for C++ programs (C++17, header-only, namespace gpumem).
 *
 * A thin layer over the C interface of gpumem.h, with the classes CUDA C++ programs know
 * from RMM: a reference-counted resource handle, a stream view, and RAII containers of
 * device memory (device_buffer, device_uvector<T>, device_scalar<T>) that allocate and free
 * on CUDA streams. It adds no state and no locking of its own: each call is the C call it
 * wraps, so resources keep their thread safety, and the containers are, like the C buffer,
 * for one thread at a time.
 *
 * Errors. A failed gpumem call throws, with the library's message (gpumem_last_error_message
 * at the time of the failure):
 *   gpumem::out_of_memory  GPUMEM_ERR_OUT_OF_MEMORY; a std::bad_alloc
 *   gpumem::error          every other status; a std::runtime_error
 * Both are also a gpumem::failure, which carries status(), status_name(), message() and
 * cuda_error(): `catch (const gpumem::failure &)` catches everything gpumem throws. An out of
 * memory is deliberately not a gpumem::error: std::runtime_error and std::bad_alloc are each
 * a std::exception, and a class deriving from both holds two of them, so that
 * `catch (const std::exception &)` would no longer match it. As it is, each exception is one
 * std::exception, and catch (std::exception&), catch (std::bad_alloc&) and
 * catch (gpumem::failure&) all work. Indexes and ranges outside a container throw
 * std::out_of_range, element counts whose byte size overflows std::length_error (before any
 * gpumem call). A call that throws changes nothing: the C layer leaves a resource as it was
 * on failure, and the containers make new memory and enqueue its copy before they give up
 * the old one. Destructors never throw (a failure to free is dropped: the memory is then
 * leaked, never freed twice).
 *
 * Streams. gpumem_stream, CUstream and cudaStream_t are one type (struct CUstream_st *), so
 * a stream_view takes any of them; stream_view{} is the legacy default stream. Every
 * container operation is stream-ordered as RMM's: memory a call allocates on stream S may be
 * used at once by work enqueued on S after the call; a container frees its memory on its
 * stream (the one its constructor or its last resize, reserve or shrink_to_fit was given, or
 * set_stream's), once the work already enqueued there is done, without synchronizing. Calls
 * that return host values (element, value, to_host, copy_to_host) synchronize the stream
 * they are given. Using a container on another stream than its own is the caller's ordering
 * to make (an event), as in CUDA.
 *
 * Compiles with any C++17 compiler and with nvcc (host code); it includes no CUDA header. */
#ifndef GPUMEM_HPP
#define GPUMEM_HPP

#include "gpumem.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if __cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L)
#error "gpumem.hpp needs C++17"
#endif

namespace gpumem {

/* ---------------------------------------------------------------------------------------
 * Exceptions
 * ------------------------------------------------------------------------------------- */

/* What every exception gpumem throws carries: the C status and the library's message. Not a
 * std::exception itself (see the header's opening comment). Copying never throws. */
class failure {
public:
  virtual ~failure() = default;
  gpumem_status status() const noexcept { return status_; }
  /* "GPUMEM_ERR_OUT_OF_MEMORY", ...; static. */
  const char *status_name() const noexcept { return gpumem_status_name(status_); }
  /* The library's message (for an out of memory: the request, the resource and its report). */
  const char *message() const noexcept { return text_.what(); }
  /* The raw CUresult of the last failed driver call of the thread (0: none), as
   * gpumem_last_cuda_error() said when the failure was thrown. */
  int cuda_error() const noexcept { return cuda_error_; }

protected:
  failure(gpumem_status status, const std::string &message, int cuda_error)
      : status_(status), cuda_error_(cuda_error), text_(message) {}

private:
  gpumem_status status_;
  int cuda_error_;
  std::runtime_error text_; /* reference-counted text: copies never throw */
};

/* Every failure but out of memory: invalid arguments, misuse, driver errors, injected
 * faults, ... what() is the library's message. */
class error : public std::runtime_error, public failure {
public:
  error(gpumem_status status, const std::string &message, int cuda_error = 0)
      : std::runtime_error(message), failure(status, message, cuda_error) {}
};

/* GPUMEM_ERR_OUT_OF_MEMORY: a std::bad_alloc, so code that handles running out of memory
 * handles this too. what() is the library's message. */
class out_of_memory : public std::bad_alloc, public failure {
public:
  out_of_memory(const std::string &message, int cuda_error = 0)
      : failure(GPUMEM_ERR_OUT_OF_MEMORY, message, cuda_error) {}
  const char *what() const noexcept override { return message(); }
};

namespace detail {
/* A failure seen but not thrown yet: taken at once, so that the cleanup calls made before
 * throwing cannot change the message. */
struct pending_failure {
  gpumem_status status;
  std::string message;
  int cuda_error;
};

inline pending_failure capture(gpumem_status status) {
  return {status, gpumem_last_error_message(), gpumem_last_cuda_error()};
}

[[noreturn]] inline void raise(const pending_failure &f) {
  if (f.status == GPUMEM_ERR_OUT_OF_MEMORY)
    throw out_of_memory(f.message, f.cuda_error);
  throw error(f.status, f.message, f.cuda_error);
}

[[noreturn]] inline void raise(gpumem_status status) {
  raise(capture(status));
}

inline std::size_t bytes_of(std::size_t count, std::size_t size) {
  if (size != 0 && count > std::numeric_limits<std::size_t>::max() / size)
    throw std::length_error("gpumem: element count too large for size_t bytes");
  return count * size;
}
} // namespace detail

/* Throws the exception of `status` (with the thread's message) unless it is GPUMEM_OK: for
 * C calls a C++ program makes itself, e.g. gpumem::check(gpumem_pool_trim(mr, NULL)). */
inline void check(gpumem_status status) {
  if (status != GPUMEM_OK)
    detail::raise(status);
}

/* ---------------------------------------------------------------------------------------
 * Streams
 * ------------------------------------------------------------------------------------- */

/* A non-owning view of a CUDA stream: a gpumem_stream, CUstream or cudaStream_t (one type).
 * Default-constructed, it is the legacy default stream (NULL). It is built from a stream
 * handle only: 0 and nullptr are refused at compile time, so that a size can never pass for
 * a stream by mistake (write stream_view{} for the default stream). Copies are free. */
class stream_view {
public:
  constexpr stream_view() noexcept = default;
  constexpr stream_view(gpumem_stream stream) noexcept : stream_(stream) {}
  stream_view(int) = delete;
  stream_view(std::nullptr_t) = delete;

  constexpr gpumem_stream value() const noexcept { return stream_; }
  constexpr operator gpumem_stream() const noexcept { return stream_; }
  /* The legacy default stream: NULL or CU_STREAM_LEGACY. */
  bool is_default() const noexcept {
    return stream_ == nullptr || stream_ == reinterpret_cast<gpumem_stream>(std::uintptr_t{1});
  }
  /* The per-thread default stream, CU_STREAM_PER_THREAD. */
  bool is_per_thread_default() const noexcept {
    return stream_ == reinterpret_cast<gpumem_stream>(std::uintptr_t{2});
  }
  /* Waits for the work enqueued on the stream. Throws gpumem::error. */
  void synchronize() const { check(gpumem_stream_synchronize(stream_)); }

  friend bool operator==(stream_view a, stream_view b) noexcept { return a.stream_ == b.stream_; }
  friend bool operator!=(stream_view a, stream_view b) noexcept { return a.stream_ != b.stream_; }

private:
  gpumem_stream stream_ = nullptr;
};

/* The legacy default stream, and the per-thread default stream (CU_STREAM_PER_THREAD). */
inline stream_view default_stream() noexcept {
  return stream_view{};
}
inline stream_view per_thread_default_stream() noexcept {
  return stream_view{reinterpret_cast<gpumem_stream>(std::uintptr_t{2})};
}

/* An owned non-blocking stream (gpumem_stream_create), for programs that do not use the
 * CUDA runtime: destroyed with the object (after its work is done, as cuStreamDestroy).
 * Movable, not copyable; converts to stream_view. The constructor throws gpumem::error. */
class stream {
public:
  explicit stream(int device = GPUMEM_CURRENT_DEVICE) {
    check(gpumem_stream_create(device, &stream_));
  }
  stream(stream &&other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  stream &operator=(stream &&other) noexcept {
    if (this != &other) {
      reset();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  stream(const stream &) = delete;
  stream &operator=(const stream &) = delete;
  ~stream() { reset(); }

  stream_view view() const noexcept { return stream_view{stream_}; }
  operator stream_view() const noexcept { return view(); }
  gpumem_stream value() const noexcept { return stream_; }
  void synchronize() const { view().synchronize(); }

private:
  void reset() noexcept {
    if (stream_)
      gpumem_stream_destroy(stream_);
    stream_ = nullptr;
  }
  gpumem_stream stream_ = nullptr;
};

/* ---------------------------------------------------------------------------------------
 * Resources
 * ------------------------------------------------------------------------------------- */

/* A handle to a gpumem_resource that holds one reference to it: copies retain, destruction
 * releases, so the resource lives while any handle (or anything built on it: a buffer, an
 * adaptor over it, the current-resource table) does. A default-constructed or moved-from
 * handle is empty (operator bool false); calls on it throw gpumem::error
 * (GPUMEM_ERR_INVALID_ARGUMENT), except get(), name() ("") and device() (-1).
 *
 * From a C handle: resource::adopt(mr) takes over the reference the caller holds (from a
 * gpumem_*_create call; the caller must not release it), resource::borrow(mr) retains one of
 * its own (the caller keeps and releases its own). get() hands the C handle to C calls
 * without a reference; detach() gives the reference up to the caller.
 *
 * The last release of a resource that still has live allocations does not destroy it (the C
 * rule); the destructor drops that failure silently, and the resource stays alive.
 * Handles may be shared between threads as resources are; one handle object is not to be
 * assigned from several threads at once. */
class resource {
public:
  resource() noexcept = default;
  static resource adopt(gpumem_resource *mr) noexcept { return resource(mr); }
  static resource borrow(gpumem_resource *mr) noexcept {
    return resource(gpumem_resource_retain(mr));
  }

  /* A resource from a spec string (gpumem_resource_from_spec), e.g. "pool(vmm)",
   * "limit(pool(cuda), max=1GiB)", for `device` (or the current device). Throws gpumem::error
   * with the spec and the offending character for a bad spec. */
  static resource from_spec(const char *spec, int device = GPUMEM_CURRENT_DEVICE) {
    gpumem_resource *mr = nullptr;
    check(gpumem_resource_from_spec_for_device(spec, device, &mr));
    return adopt(mr);
  }
  static resource from_spec(const std::string &spec, int device = GPUMEM_CURRENT_DEVICE) {
    return from_spec(spec.c_str(), device);
  }

  /* Composition, as the C creation functions (options: zero means default). Each new
   * resource retains its upstream: the upstream handle may be dropped at once. */
  static resource cuda(int device = GPUMEM_CURRENT_DEVICE) {
    gpumem_resource *mr = nullptr;
    check(gpumem_cuda_create(device, &mr));
    return adopt(mr);
  }
  static resource vmm(int device = GPUMEM_CURRENT_DEVICE, const gpumem_vmm_options &opts = {}) {
    gpumem_resource *mr = nullptr;
    check(gpumem_vmm_create(device, &opts, &mr));
    return adopt(mr);
  }
  /* release_holes_over: 0 the default (110% for dominant and recurring requests),
   * GPUMEM_POOL_KEEP_HOLES never; release_holes_time: the most percentage of the time
   * releases take, 0 the default (25), 100 no budget (gpumem.h). */
  static resource pool(const resource &upstream, std::size_t initial_size = 0,
                       std::size_t maximum_size = 0, unsigned release_holes_over = 0,
                       unsigned release_holes_time = 0) {
    gpumem_pool_options opts{initial_size, maximum_size, release_holes_over, release_holes_time};
    gpumem_resource *mr = nullptr;
    check(gpumem_pool_create(upstream.get(), &opts, &mr));
    return adopt(mr);
  }
  static resource limit(const resource &upstream, std::size_t maximum_size) {
    gpumem_limit_options opts{maximum_size};
    gpumem_resource *mr = nullptr;
    check(gpumem_limit_create(upstream.get(), &opts, &mr));
    return adopt(mr);
  }
  static resource statistics(const resource &upstream) {
    gpumem_resource *mr = nullptr;
    check(gpumem_statistics_create(upstream.get(), nullptr, &mr));
    return adopt(mr);
  }
  static resource faulty(const resource &upstream, const gpumem_faulty_options &opts) {
    gpumem_resource *mr = nullptr;
    check(gpumem_faulty_create(upstream.get(), &opts, &mr));
    return adopt(mr);
  }

  resource(const resource &other) noexcept : mr_(gpumem_resource_retain(other.mr_)) {}
  resource(resource &&other) noexcept : mr_(std::exchange(other.mr_, nullptr)) {}
  resource &operator=(const resource &other) noexcept {
    gpumem_resource *mr = gpumem_resource_retain(other.mr_); /* first: self-assignment */
    drop();
    mr_ = mr;
    return *this;
  }
  resource &operator=(resource &&other) noexcept {
    if (this != &other) {
      drop();
      mr_ = std::exchange(other.mr_, nullptr);
    }
    return *this;
  }
  ~resource() { drop(); }

  gpumem_resource *get() const noexcept { return mr_; }
  gpumem_resource *detach() noexcept { return std::exchange(mr_, nullptr); }
  explicit operator bool() const noexcept { return mr_ != nullptr; }
  friend bool operator==(const resource &a, const resource &b) noexcept { return a.mr_ == b.mr_; }
  friend bool operator!=(const resource &a, const resource &b) noexcept { return a.mr_ != b.mr_; }

  /* gpumem_allocate_aligned: `bytes` usable at once by work enqueued on `stream` after the
   * call (0 bytes: nullptr). Throws gpumem::out_of_memory or gpumem::error. */
  void *allocate(std::size_t bytes, stream_view stream = {},
                 std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) const {
    void *ptr = nullptr;
    gpumem_status status = gpumem_allocate_aligned(mr_, bytes, alignment, stream.value(), &ptr);
    if (status != GPUMEM_OK)
      detail::raise(status);
    return ptr;
  }
  /* gpumem_deallocate_aligned: free once the work enqueued on `stream` is done. Throws
   * gpumem::error (GPUMEM_ERR_MISUSE for a pointer or size the resource did not give). */
  void deallocate(void *ptr, std::size_t bytes, stream_view stream = {},
                  std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT) const {
    gpumem_status status = gpumem_deallocate_aligned(mr_, ptr, bytes, alignment, stream.value());
    if (status != GPUMEM_OK)
      detail::raise(status);
  }

  /* The kind ("pool", "limit", ...); "" for an empty handle. */
  const char *name() const noexcept { return mr_ ? gpumem_resource_name(mr_) : ""; }
  /* The spec that builds an equal resource (gpumem_resource_describe). */
  std::string spec() const {
    std::string text(256, '\0');
    for (;;) {
      gpumem_status status = gpumem_resource_describe(mr_, &text[0], text.size());
      if (status == GPUMEM_OK)
        break;
      if (status != GPUMEM_ERR_INVALID_ARGUMENT || !mr_ || text.size() >= (1u << 20))
        detail::raise(status);
      text.resize(text.size() * 4);
    }
    text.resize(std::strlen(text.c_str()));
    return text;
  }
  /* The device the resource allocates for; -1 for an empty handle. */
  int device() const noexcept { return mr_ ? gpumem_resource_device(mr_) : -1; }

  /* A numeric fact (gpumem_resource_query); nullopt where the resource does not know it. */
  std::optional<std::uint64_t> query(gpumem_query what) const {
    std::uint64_t value = 0;
    gpumem_status status = gpumem_resource_query(mr_, what, &value);
    if (status == GPUMEM_ERR_UNSUPPORTED && mr_)
      return std::nullopt;
    check(status);
    return value;
  }
  /* The common facts; each throws gpumem::error (GPUMEM_ERR_UNSUPPORTED) where unknown. */
  std::uint64_t live_bytes() const { return known(GPUMEM_QUERY_LIVE_BYTES); }
  std::uint64_t live_count() const { return known(GPUMEM_QUERY_LIVE_COUNT); }
  std::uint64_t reserved_bytes() const { return known(GPUMEM_QUERY_RESERVED_BYTES); }
  std::uint64_t peak_live_bytes() const { return known(GPUMEM_QUERY_PEAK_LIVE_BYTES); }
  std::uint64_t peak_reserved_bytes() const { return known(GPUMEM_QUERY_PEAK_RESERVED_BYTES); }

  /* What the resource can do (gpumem_resource_get_capabilities). */
  gpumem_resource_capabilities capabilities() const {
    gpumem_resource_capabilities caps{};
    caps.size = sizeof caps;
    check(gpumem_resource_get_capabilities(mr_, &caps));
    return caps;
  }
  /* The upstream of an adaptor or suballocator (a handle of its own); throws
   * GPUMEM_ERR_UNSUPPORTED for a base resource. */
  resource upstream() const {
    gpumem_resource *up = nullptr;
    check(gpumem_resource_upstream(mr_, &up));
    return borrow(up);
  }
  /* Gives free memory back to the upstream (gpumem_resource_trim); returns the bytes. */
  std::size_t trim() {
    std::size_t released = 0;
    check(gpumem_resource_trim(mr_, &released));
    return released;
  }
  /* The report of a request of `bytes` (gpumem_resource_report) and the stats document
   * (gpumem_resource_stats_json). */
  std::string report(std::size_t bytes = 0, std::size_t alignment = 0) const {
    return text_of([&](char *buf, std::size_t size, std::size_t *needed) {
      return gpumem_resource_report(mr_, bytes, alignment, buf, size, needed);
    });
  }
  std::string stats_json() const {
    return text_of([&](char *buf, std::size_t size, std::size_t *needed) {
      return gpumem_resource_stats_json(mr_, buf, size, needed);
    });
  }

private:
  explicit resource(gpumem_resource *mr) noexcept : mr_(mr) {}

  /* Moved-from handles are everywhere (parameters taken by value and moved on): they skip
   * the library call. */
  void drop() noexcept {
    if (mr_)
      gpumem_resource_release(mr_);
  }

  std::uint64_t known(gpumem_query what) const {
    std::uint64_t value = 0;
    check(gpumem_resource_query(mr_, what, &value));
    return value;
  }
  /* Text from a (buf, size, needed) call: asks for the size, then again with room to spare
   * while the figures move. */
  template <typename Call> static std::string text_of(Call call) {
    std::size_t needed = 0;
    gpumem_status status = call(nullptr, 0, &needed);
    for (int attempt = 0; attempt < 8; attempt++) {
      if (status != GPUMEM_OK && (status != GPUMEM_ERR_INVALID_ARGUMENT || needed == 0))
        detail::raise(status);
      std::string text(needed + 256, '\0');
      status = call(&text[0], text.size(), &needed);
      if (status == GPUMEM_OK) {
        text.resize(std::strlen(text.c_str()));
        return text;
      }
    }
    detail::raise(status);
  }

  gpumem_resource *mr_ = nullptr;
};

/* The current device's resource (a handle of its own, so it stays valid after the device's
 * resource is replaced). Throws gpumem::error (no device, a bad GPUMEM_RESOURCE). */
inline resource get_current_device_resource() {
  gpumem_resource *mr = nullptr;
  check(gpumem_get_current_device_resource(&mr));
  return resource::borrow(mr);
}
inline resource get_per_device_resource(int device) {
  gpumem_resource *mr = nullptr;
  check(gpumem_get_per_device_resource(device, &mr));
  return resource::borrow(mr);
}
/* Makes mr the resource of its own device; the table takes a reference of its own, so mr's
 * handle may go at once. (Unlike RMM's, it returns nothing: the one it replaces may not have
 * been made yet; get_current_device_resource() first gives it.) Throws gpumem::error for an
 * empty handle. */
inline void set_current_device_resource(const resource &mr) {
  check(gpumem_set_current_device_resource(mr.get()));
}
/* As set_current_device_resource for a given device; an empty mr restores the default. */
inline void set_per_device_resource(int device, const resource &mr) {
  check(gpumem_set_per_device_resource(device, mr.get()));
}

/* ---------------------------------------------------------------------------------------
 * device_buffer
 * ------------------------------------------------------------------------------------- */

/* An untyped, uninitialized, resizable block of device memory, as RMM's device_buffer: a
 * size, a capacity (bytes allocated), a stream and a resource, of which it holds a reference
 * (the resource outlives the buffer). Allocated with an alignment (default 256, more on
 * request: a power of two).
 *
 * Ownership: the buffer owns its memory and frees it on its stream when destroyed. Moving
 * takes the memory (the moved-from buffer is empty, on the default stream, with the same
 * resource); copying is explicit, as a deep copy on a stream: device_buffer(other, stream).
 * Stream order: the constructors and resize/reserve/shrink_to_fit allocate, and copy the
 * old contents, on the stream they are given, which becomes the buffer's stream; its old
 * memory is freed on that stream after the copy. Throws: gpumem::out_of_memory,
 * gpumem::error (then the buffer is unchanged), std::out_of_range for a host copy outside
 * the buffer. Not for use from several threads at once. */
class device_buffer {
public:
  /* An empty buffer on the default stream, over the current device's resource (the
   * constructors without a resource throw gpumem::error where there is none to be had: no
   * device, a bad GPUMEM_RESOURCE). */
  device_buffer() : mr_(get_current_device_resource()) {}

  /* `size` uninitialized bytes from the current device's resource, or from mr. */
  device_buffer(std::size_t size, stream_view stream)
      : device_buffer(size, stream, get_current_device_resource()) {}
  device_buffer(std::size_t size, stream_view stream, resource mr,
                std::size_t alignment = GPUMEM_DEFAULT_ALIGNMENT)
      : stream_(stream.value()), alignment_(alignment), mr_(std::move(mr)) {
    data_ = allocate(size, stream);
    size_ = capacity_ = size;
  }

  /* `size` bytes copied from `source` (host or device memory) on `stream`. The copy is
   * enqueued: `source` must stay valid until the stream's work is done (pageable host
   * memory is staged by the driver before the call returns). */
  device_buffer(const void *source, std::size_t size, stream_view stream)
      : device_buffer(source, size, stream, get_current_device_resource()) {}
  device_buffer(const void *source, std::size_t size, stream_view stream, resource mr)
      : device_buffer(size, stream, std::move(mr)) {
    /* Once a delegating constructor has run the object exists: if this throws, the
     * destructor frees the memory. */
    if (size > 0)
      check(gpumem_memcpy_async(data_, source, size, stream.value()));
  }

  /* A deep copy of other's size bytes (same alignment) on `stream`, from other's resource
   * or from mr. Capacity equals size. */
  device_buffer(const device_buffer &other, stream_view stream)
      : device_buffer(other, stream, other.mr_) {}
  device_buffer(const device_buffer &other, stream_view stream, resource mr)
      : device_buffer(other.size_, stream, std::move(mr), other.alignment_) {
    if (size_ > 0) /* on failure, the destructor frees the memory */
      check(gpumem_memcpy_async(data_, other.data_, size_, stream.value()));
  }

  device_buffer(const device_buffer &) = delete;
  device_buffer &operator=(const device_buffer &) = delete;

  device_buffer(device_buffer &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)),
        stream_(std::exchange(other.stream_, nullptr)), alignment_(other.alignment_),
        mr_(other.mr_) {}
  /* Frees this buffer's memory (on its stream) and takes other's memory, stream and
   * resource. Assigning a buffer to itself changes nothing. */
  device_buffer &operator=(device_buffer &&other) noexcept {
    if (this != &other) {
      free_memory();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
      stream_ = std::exchange(other.stream_, nullptr);
      alignment_ = other.alignment_;
      mr_ = other.mr_;
    }
    return *this;
  }
  ~device_buffer() { free_memory(); }

  void *data() noexcept { return data_; }
  const void *data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::ptrdiff_t ssize() const noexcept { return static_cast<std::ptrdiff_t>(size_); }
  std::size_t capacity() const noexcept { return capacity_; }
  bool is_empty() const noexcept { return size_ == 0; }
  std::size_t alignment() const noexcept { return alignment_; }
  stream_view stream() const noexcept { return stream_view{stream_}; }
  /* The stream later operations default to and the final free is ordered on. */
  void set_stream(stream_view stream) noexcept { stream_ = stream.value(); }
  const resource &memory_resource() const noexcept { return mr_; }

  /* Sets the size. Past the capacity: new memory of exactly `new_size` bytes on `stream`
   * with the contents copied; otherwise the memory stays (and the new bytes are
   * uninitialized). */
  void resize(std::size_t new_size, stream_view stream) {
    if (new_size > capacity_)
      reallocate(new_size, stream);
    size_ = new_size;
    stream_ = stream.value();
  }
  /* Makes the capacity at least `new_capacity`; size and contents stay. */
  void reserve(std::size_t new_capacity, stream_view stream) {
    if (new_capacity > capacity_)
      reallocate(new_capacity, stream);
    stream_ = stream.value();
  }
  /* Makes the capacity equal to the size (new memory, contents copied). */
  void shrink_to_fit(stream_view stream) {
    if (size_ < capacity_)
      reallocate(size_, stream);
    stream_ = stream.value();
  }

  /* Copies `bytes` bytes from `offset` to host memory `dst` on `stream` and waits for them. */
  void copy_to_host(void *dst, std::size_t bytes, stream_view stream,
                    std::size_t offset = 0) const {
    check_range(offset, bytes, "copy_to_host");
    if (bytes == 0)
      return;
    check(
        gpumem_memcpy_async(dst, static_cast<const char *>(data_) + offset, bytes, stream.value()));
    stream.synchronize();
  }
  /* Enqueues a copy of `bytes` bytes from host memory `src` to `offset` on `stream` (src as
   * the source of the copying constructor). */
  void copy_from_host(const void *src, std::size_t bytes, stream_view stream,
                      std::size_t offset = 0) {
    check_range(offset, bytes, "copy_from_host");
    if (bytes > 0)
      check(gpumem_memcpy_async(static_cast<char *>(data_) + offset, src, bytes, stream.value()));
  }

private:
  void *allocate(std::size_t bytes, stream_view stream) const {
    void *ptr = nullptr;
    gpumem_status status =
        gpumem_allocate_aligned(mr_.get(), bytes, alignment_, stream.value(), &ptr);
    if (status != GPUMEM_OK)
      detail::raise(status);
    return ptr;
  }
  /* New memory of `capacity` bytes holding the first min(size, capacity) bytes, the old
   * memory freed on `stream` after the copy; on failure nothing changes. */
  void reallocate(std::size_t capacity, stream_view stream) {
    void *fresh = allocate(capacity, stream);
    std::size_t keep = size_ < capacity ? size_ : capacity;
    gpumem_status status =
        keep ? gpumem_memcpy_async(fresh, data_, keep, stream.value()) : GPUMEM_OK;
    if (status == GPUMEM_OK)
      status = gpumem_deallocate_aligned(mr_.get(), data_, capacity_, alignment_, stream.value());
    if (status != GPUMEM_OK) {
      detail::pending_failure failure = detail::capture(status);
      gpumem_deallocate_aligned(mr_.get(), fresh, capacity, alignment_, stream.value());
      detail::raise(failure);
    }
    data_ = fresh;
    capacity_ = capacity;
  }
  void check_range(std::size_t offset, std::size_t bytes, const char *what) const {
    if (offset > size_ || bytes > size_ - offset)
      throw std::out_of_range(std::string("gpumem::device_buffer::") + what + ": bytes " +
                              std::to_string(offset) + " to " + std::to_string(offset + bytes) +
                              " outside a buffer of " + std::to_string(size_));
  }
  void free_memory() noexcept {
    if (data_)
      gpumem_deallocate_aligned(mr_.get(), data_, capacity_, alignment_, stream_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

  void *data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  gpumem_stream stream_ = nullptr;
  std::size_t alignment_ = GPUMEM_DEFAULT_ALIGNMENT;
  resource mr_;
};

/* ---------------------------------------------------------------------------------------
 * device_uvector<T>
 * ------------------------------------------------------------------------------------- */

/* A typed, uninitialized vector of device memory, as RMM's device_uvector: elements are
 * never constructed or destroyed, so T must be trivially copyable (and default
 * constructible, for element()). Its memory is a device_buffer aligned to
 * max(alignof(T), 256), so over-aligned T (alignas(512)) works. Iterators are device
 * pointers (T *): for kernels and device algorithms, never to dereference on the host.
 *
 * Ownership, moves, deep copies on a stream, stream order and what throws: as
 * device_buffer, counted in elements (release() hands the memory over as a device_buffer).
 * Element access takes a stream: element() and to_host() wait for it; set_element_async()
 * enqueues a copy of a host value, which must stay valid until the stream's work is done (so
 * a temporary is refused at compile time; set_element() waits instead). An index past the
 * end throws std::out_of_range. */
template <typename T> class device_uvector {
  static_assert(std::is_trivially_copyable<T>::value,
                "gpumem::device_uvector<T> needs a trivially copyable T: its elements are "
                "copied as bytes and never constructed");

public:
  using value_type = T;
  using size_type = std::size_t;
  using reference = T &;
  using const_reference = const T &;
  using pointer = T *;
  using const_pointer = const T *;
  using iterator = T *;
  using const_iterator = const T *;

  /* The alignment of the memory: alignof(T), at least 256. */
  static constexpr std::size_t alignment = alignof(T) > GPUMEM_DEFAULT_ALIGNMENT
                                               ? alignof(T)
                                               : GPUMEM_DEFAULT_ALIGNMENT;

  /* An empty vector on the default stream over the current device's resource. */
  device_uvector() : buffer_(0, stream_view{}, get_current_device_resource(), alignment) {}
  /* `size` uninitialized elements, from the current device's resource or from mr. */
  device_uvector(std::size_t size, stream_view stream)
      : device_uvector(size, stream, get_current_device_resource()) {}
  device_uvector(std::size_t size, stream_view stream, resource mr)
      : buffer_(detail::bytes_of(size, sizeof(T)), stream, std::move(mr), alignment) {}
  /* A deep copy of other's elements on `stream`, from other's resource or from mr. */
  device_uvector(const device_uvector &other, stream_view stream)
      : buffer_(other.buffer_, stream) {}
  device_uvector(const device_uvector &other, stream_view stream, resource mr)
      : buffer_(other.buffer_, stream, std::move(mr)) {}

  device_uvector(const device_uvector &) = delete;
  device_uvector &operator=(const device_uvector &) = delete;
  device_uvector(device_uvector &&) noexcept = default;
  device_uvector &operator=(device_uvector &&) noexcept = default;
  ~device_uvector() = default;

  T *element_ptr(std::size_t i) {
    check_index(i, "element_ptr");
    return data() + i;
  }
  const T *element_ptr(std::size_t i) const {
    check_index(i, "element_ptr");
    return data() + i;
  }

  /* Enqueues a copy of `value` into element i on `stream`. */
  void set_element_async(std::size_t i, const T &value, stream_view stream) {
    check_index(i, "set_element_async");
    check(gpumem_memcpy_async(data() + i, &value, sizeof(T), stream.value()));
  }
  void set_element_async(std::size_t i, T &&value, stream_view stream) = delete;
  /* Enqueues setting element i's bytes to zero (a memset: no host value to keep alive). */
  void set_element_to_zero_async(std::size_t i, stream_view stream) {
    check_index(i, "set_element_to_zero_async");
    check(gpumem_memset_async(data() + i, 0, sizeof(T), stream.value()));
  }
  /* Copies `value` into element i and waits for `stream`. */
  void set_element(std::size_t i, const T &value, stream_view stream) {
    set_element_async(i, value, stream);
    stream.synchronize();
  }
  /* Element i, read after the work enqueued on `stream` (which it waits for). */
  T element(std::size_t i, stream_view stream) const {
    check_index(i, "element");
    T value;
    check(gpumem_memcpy_async(&value, data() + i, sizeof(T), stream.value()));
    stream.synchronize();
    return value;
  }
  T front_element(stream_view stream) const { return element(0, stream); }
  T back_element(stream_view stream) const {
    if (is_empty())
      check_index(0, "back_element");
    return element(size() - 1, stream);
  }

  /* Capacity for at least `new_capacity` elements; elements kept. */
  void reserve(std::size_t new_capacity, stream_view stream) {
    buffer_.reserve(detail::bytes_of(new_capacity, sizeof(T)), stream);
  }
  /* `new_size` elements: the first ones kept, new ones uninitialized; memory is reallocated
   * only past the capacity. */
  void resize(std::size_t new_size, stream_view stream) {
    buffer_.resize(detail::bytes_of(new_size, sizeof(T)), stream);
  }
  void shrink_to_fit(stream_view stream) { buffer_.shrink_to_fit(stream); }
  /* Hands the memory over as a device_buffer; the vector is left empty. */
  device_buffer release() noexcept { return std::move(buffer_); }

  /* The elements, copied to the host after the work enqueued on `stream` (which it waits
   * for). */
  std::vector<T> to_host(stream_view stream) const {
    std::vector<T> host(size());
    buffer_.copy_to_host(host.data(), buffer_.size(), stream);
    return host;
  }
  /* Enqueues a copy of `count` host elements from `src` to elements first.. on `stream`
   * (src as set_element_async's value). */
  void copy_from_host(const T *src, std::size_t count, stream_view stream, std::size_t first = 0) {
    if (first > size() || count > size() - first)
      throw std::out_of_range("gpumem::device_uvector::copy_from_host: " + std::to_string(count) +
                              " elements from index " + std::to_string(first) + " of a vector of " +
                              std::to_string(size()));
    buffer_.copy_from_host(src, count * sizeof(T), stream, first * sizeof(T));
  }

  std::size_t size() const noexcept { return buffer_.size() / sizeof(T); }
  std::ptrdiff_t ssize() const noexcept { return static_cast<std::ptrdiff_t>(size()); }
  std::size_t capacity() const noexcept { return buffer_.capacity() / sizeof(T); }
  bool is_empty() const noexcept { return size() == 0; }
  T *data() noexcept { return static_cast<T *>(buffer_.data()); }
  const T *data() const noexcept { return static_cast<const T *>(buffer_.data()); }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size(); }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size(); }
  const_iterator cbegin() const noexcept { return data(); }
  const_iterator cend() const noexcept { return data() + size(); }
  stream_view stream() const noexcept { return buffer_.stream(); }
  void set_stream(stream_view stream) noexcept { buffer_.set_stream(stream); }
  const resource &memory_resource() const noexcept { return buffer_.memory_resource(); }

private:
  void check_index(std::size_t i, const char *what) const {
    if (i >= size())
      throw std::out_of_range(std::string("gpumem::device_uvector::") + what + ": index " +
                              std::to_string(i) + " of a vector of " + std::to_string(size()));
  }

  device_buffer buffer_;
};

/* A device_uvector holding a copy of `count` host elements (enqueued on `stream`; `src` must
 * stay valid until the stream's work is done, as for set_element_async), from the current
 * device's resource or from mr. */
template <typename T>
device_uvector<T> to_device(const T *src, std::size_t count, stream_view stream, resource mr) {
  device_uvector<T> v(count, stream, std::move(mr));
  v.copy_from_host(src, count, stream);
  return v;
}
template <typename T>
device_uvector<T> to_device(const T *src, std::size_t count, stream_view stream) {
  return to_device(src, count, stream, get_current_device_resource());
}
template <typename T>
device_uvector<T> to_device(const std::vector<T> &src, stream_view stream, resource mr) {
  return to_device(src.data(), src.size(), stream, std::move(mr));
}
template <typename T> device_uvector<T> to_device(const std::vector<T> &src, stream_view stream) {
  return to_device(src.data(), src.size(), stream, get_current_device_resource());
}

/* ---------------------------------------------------------------------------------------
 * device_scalar<T>
 * ------------------------------------------------------------------------------------- */

/* One T in device memory, as RMM's device_scalar: for a kernel's result or argument. A
 * device_uvector<T> of one element underneath, with its ownership, stream order and
 * exceptions: value() waits for the stream it is given; set_value_async() enqueues the copy
 * of a host value that must stay valid until then (temporaries refused). A moved-from
 * scalar holds nothing (value() throws std::out_of_range). */
template <typename T> class device_scalar {
public:
  using value_type = T;

  /* Uninitialized, from the current device's resource or from mr. */
  explicit device_scalar(stream_view stream) : vector_(1, stream) {}
  device_scalar(stream_view stream, resource mr) : vector_(1, stream, std::move(mr)) {}
  /* Holding `value` (its copy enqueued on `stream`: as set_value_async). */
  device_scalar(const T &value, stream_view stream) : vector_(1, stream) {
    set_value_async(value, stream);
  }
  device_scalar(const T &value, stream_view stream, resource mr)
      : vector_(1, stream, std::move(mr)) {
    set_value_async(value, stream);
  }
  /* A deep copy of other's value on `stream`. */
  device_scalar(const device_scalar &other, stream_view stream) : vector_(other.vector_, stream) {}
  device_scalar(const device_scalar &other, stream_view stream, resource mr)
      : vector_(other.vector_, stream, std::move(mr)) {}

  device_scalar(const device_scalar &) = delete;
  device_scalar &operator=(const device_scalar &) = delete;
  device_scalar(device_scalar &&) noexcept = default;
  device_scalar &operator=(device_scalar &&) noexcept = default;
  ~device_scalar() = default;

  /* The value, read after the work enqueued on `stream` (which it waits for). */
  T value(stream_view stream) const { return vector_.element(0, stream); }
  void set_value_async(const T &value, stream_view stream) {
    vector_.set_element_async(0, value, stream);
  }
  void set_value_async(T &&value, stream_view stream) = delete;
  void set_value_to_zero_async(stream_view stream) { vector_.set_element_to_zero_async(0, stream); }

  T *data() noexcept { return vector_.data(); }
  const T *data() const noexcept { return vector_.data(); }
  std::size_t size() const noexcept { return vector_.size(); }
  stream_view stream() const noexcept { return vector_.stream(); }
  void set_stream(stream_view stream) noexcept { vector_.set_stream(stream); }
  const resource &memory_resource() const noexcept { return vector_.memory_resource(); }

private:
  device_uvector<T> vector_;
};

} // namespace gpumem

#endif /* GPUMEM_HPP */
