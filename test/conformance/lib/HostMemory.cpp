//===- HostMemory.cpp - Host memory standing in for a device --------------===//

#include "conformance/HostMemory.h"

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

using namespace kvgen::conformance;

HostMemoryBackend::~HostMemoryBackend() {
  for (auto &[pointer, mapping] : fenced)
    munmap(mapping.first, mapping.second);
}

void *HostMemoryBackend::allocate(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment, and 0 bytes must still
  // give a valid pointer.
  return std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
}

void HostMemoryBackend::deallocate(void *pointer) { std::free(pointer); }

void *HostMemoryBackend::allocateFenced(size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t mapped = (bytes + page - 1) / page * page;
  void *base = mmap(nullptr, mapped + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return nullptr;
  if (mprotect(static_cast<char *>(base) + mapped, page, PROT_NONE) != 0) {
    munmap(base, mapped + page);
    return nullptr;
  }
  // The buffer ends where the fence begins.
  char *pointer = static_cast<char *>(base) + mapped - bytes;
  fenced[pointer] = {base, mapped + page};
  return pointer;
}

void HostMemoryBackend::deallocateFenced(void *pointer) {
  auto it = fenced.find(pointer);
  if (it == fenced.end())
    return;
  munmap(it->second.first, it->second.second);
  fenced.erase(it);
}

// An empty copy may come with null pointers (the data() of an empty vector),
// which memcpy and memset must not be given even for zero bytes.
bool HostMemoryBackend::copyToDevice(void *dst, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(dst, src, bytes);
  return true;
}

bool HostMemoryBackend::copyToHost(void *dst, const void *src, size_t bytes) {
  if (bytes)
    std::memcpy(dst, src, bytes);
  return true;
}

bool HostMemoryBackend::fill(void *dst, unsigned char byte, size_t bytes) {
  if (bytes)
    std::memset(dst, byte, bytes);
  return true;
}
