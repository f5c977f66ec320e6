/* SPDX-License-Identifier: Apache-2.0 */
// Large buffers in transparent huge pages: 2 MiB-aligned and marked with
// MADV_HUGEPAGE (this kernel's default is madvise only). Collectives read a
// neighbour's buffer across processes (process_vm_readv walks and pins every
// page) and stream through their own; with 2 MiB pages there are 512 times
// fewer pages to walk and TLB entries to miss. A 4-peer charlm round (43 MB
// of gradients) took 31-33 ms instead of 51-57 ms. Header-only, shared by
// the host (gradient buffers, `loom bench collective --huge-pages`) and the
// plugins, so nothing is exported.
#ifndef LOOM_PLUGINS_COMMON_HUGE_PAGES_H
#define LOOM_PLUGINS_COMMON_HUGE_PAGES_H

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace loom_plugin_common {

constexpr size_t kHugePage = size_t(2) << 20;

// bytes of uninitialised memory, freed with std::free; from kHugePage up,
// aligned to it and advised into huge pages (advice only: without THP the
// pages stay 4 KiB).
inline void *allocate_huge(size_t bytes) {
  if (bytes < kHugePage) {
    if (void *p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
  }
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void *p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

// Advises the whole 2 MiB pages inside [p, p + bytes) of a buffer not yet
// touched (a vector or string just reserved) into huge pages, so that
// filling it faults once per 2 MiB instead of once per 4 KiB: on these
// virtual machines a fresh 130 MB buffer took 0.4-0.6 s to fill in 4 KiB
// pages, page faults nearly all of it.
inline void advise_huge(const void *p, size_t bytes) {
  if (bytes < 2 * kHugePage) return;
  const uintptr_t begin = (uintptr_t(p) + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const uintptr_t end = (uintptr_t(p) + bytes) & ~uintptr_t(kHugePage - 1);
  if (end > begin) ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
}

// This machine's physical memory in bytes: the bound for buffers a peer
// fills before it knows it needs them.
inline uint64_t physical_memory() { return uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE)); }

// Gives a vector or string room for n elements: when its capacity is
// short, fresh storage advised into huge pages replaces it (its contents
// are dropped, not copied); otherwise it keeps its storage, which is then
// filled without a page fault. Contents up to size() stay when it has room.
// Fresh storage has 1/64 more room: a snapshot's header grows by a few
// bytes as its step counters gain digits, and each byte over would cost a
// whole fresh buffer again.
template <class Buffer>
void reserve_huge(Buffer &b, size_t n) {
  if (b.capacity() >= n) return;
  const size_t room = n + n / 64;
  Buffer fresh;
  fresh.reserve(room);
  advise_huge(fresh.data(), room * sizeof(typename Buffer::value_type));
  b.swap(fresh);
}

// For std::vector<T, HugePageAllocator<T>>; huge = false allocates plainly
// (a switch for comparisons).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  bool huge = true;
  HugePageAllocator() = default;
  explicit HugePageAllocator(bool use_huge) : huge(use_huge) {}
  template <class U>
  HugePageAllocator(const HugePageAllocator<U> &other) : huge(other.huge) {}
  T *allocate(size_t n) {
    if (huge) return static_cast<T *>(allocate_huge(n * sizeof(T)));
    if (void *p = std::malloc(n ? n * sizeof(T) : 1)) return static_cast<T *>(p);
    throw std::bad_alloc();
  }
  void deallocate(T *p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const HugePageAllocator<U> &other) const { return huge == other.huge; }
  template <class U>
  bool operator!=(const HugePageAllocator<U> &other) const { return huge != other.huge; }
};

}  // namespace loom_plugin_common

#endif  // LOOM_PLUGINS_COMMON_HUGE_PAGES_H
