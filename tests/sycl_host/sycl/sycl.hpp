// A host-only stand-in for the SYCL 2020 subset tilegraph's sycl backend emits, for tests.
//
// It is NOT a SYCL implementation: "device" memory is host memory, work-groups run one after the
// other, the work-items of a group run as host threads (so barriers really synchronise), and
// events complete immediately. It lets the generated SYCL source compile with g++ and run on the
// host so the tests can check its numerics and structure; real builds use a SYCL compiler
// (icpx -fsycl, acpp) and its own <sycl/sycl.hpp>.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sycl {

namespace access {
enum class fence_space { local_space, global_space, global_and_local };
}

template <int Dims = 1> class range {
 public:
  explicit range(size_t n) : n_(n) {}
  size_t size() const { return n_; }
  size_t operator[](int) const { return n_; }

 private:
  size_t n_;
};

template <int Dims = 1> class id {
 public:
  explicit id(size_t i) : i_(i) {}
  size_t operator[](int) const { return i_; }
  operator size_t() const { return i_; }

 private:
  size_t i_;
};

template <int Dims = 1> class nd_range {
 public:
  nd_range(range<Dims> global, range<Dims> local) : global_(global), local_(local) {}
  range<Dims> get_global_range() const { return global_; }
  range<Dims> get_local_range() const { return local_; }

 private:
  range<Dims> global_, local_;
};

namespace detail {
// A reusable barrier for the threads of one work-group.
class group_barrier {
 public:
  explicit group_barrier(size_t count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    size_t generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation != generation_; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t count_, waiting_ = 0, generation_ = 0;
};
}  // namespace detail

template <int Dims = 1> class nd_item {
 public:
  nd_item(size_t group, size_t local, size_t local_size, detail::group_barrier* barrier)
      : group_(group), local_(local), local_size_(local_size), barrier_(barrier) {}
  size_t get_group_linear_id() const { return group_; }
  size_t get_local_id(int) const { return local_; }
  size_t get_global_id(int) const { return group_ * local_size_ + local_; }
  void barrier(access::fence_space = access::fence_space::global_and_local) const { barrier_->arrive_and_wait(); }

 private:
  size_t group_, local_, local_size_;
  detail::group_barrier* barrier_;
};

class event {
 public:
  void wait() {}
};

class handler {
 public:
  template <class Kernel> void parallel_for(range<1> r, Kernel kernel) {
    for (size_t i = 0; i < r.size(); ++i) kernel(id<1>(i));
  }
  template <class Kernel> void parallel_for(nd_range<1> r, Kernel kernel) {
    const size_t local = r.get_local_range().size();
    const size_t groups = r.get_global_range().size() / local;
    for (size_t g = 0; g < groups; ++g) {
      detail::group_barrier barrier(local);
      std::vector<std::thread> items;
      for (size_t l = 0; l < local; ++l)
        items.emplace_back([&, l] { kernel(nd_item<1>(g, l, local, &barrier)); });
      for (auto& t : items) t.join();
    }
  }
};

// Work-group local memory: one block, reused by the groups (they run one at a time here).
template <class T, int Dims = 1> class local_accessor {
 public:
  local_accessor(range<1> n, handler&) : data_(std::make_shared<std::vector<T>>(n.size())) {}
  T& operator[](size_t i) const { return (*data_)[i]; }

 private:
  std::shared_ptr<std::vector<T>> data_;
};

class queue {
 public:
  queue() = default;
  template <class CommandGroup> event submit(CommandGroup cgf) {
    handler h;
    cgf(h);
    return event();
  }
  template <class Kernel> event parallel_for(range<1> r, Kernel kernel) {
    handler h;
    h.parallel_for(r, kernel);
    return event();
  }
  event memcpy(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return event();
  }
  void wait() {}
};

inline void* malloc_device(size_t bytes, queue&) { return std::malloc(bytes ? bytes : 1); }
template <class T> T* malloc_device(size_t count, queue& q) {
  return static_cast<T*>(malloc_device(count * sizeof(T), q));
}
template <class T> T* malloc_shared(size_t count, queue& q) { return malloc_device<T>(count, q); }
inline void free(void* p, queue&) { std::free(p); }

using half = _Float16;

using std::erf;
using std::exp;
using std::fabs;
using std::floor;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;

}  // namespace sycl
