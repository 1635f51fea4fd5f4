#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace aps::precision {

// How far ahead of a codec's streaming loop its input is prefetched. On the 2-core AMD EPYC
// (Zen 4) the hardware prefetcher alone left the fp16 and bf16 encodes at 0.8x of memcpy;
// asking for the lines 2 KiB ahead, with one load per input vector, brought them to 1.0x
// (docs/PERFORMANCE.md, "Codecs at memory speed"). 1 KiB gained less, 4 KiB the same. The byte
// codes' encode measured slower with it, so only the fp16 and bf16 encodes use it.
inline constexpr uintptr_t kPrefetchBytes = 2048;

// Hints the `lines` 64-byte cache lines that start kPrefetchBytes past p. A prefetch never
// faults, so the addresses may lie past the buffer's end; they are formed as integers, never
// as out-of-range pointers.
inline void prefetchAhead(const void* p, int lines) {
#if defined(__SSE__)
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  for (int k = 0; k < lines; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(first + 64 * static_cast<uintptr_t>(k)), _MM_HINT_T0);
  }
#else
  (void)p;
  (void)lines;
#endif
}

// Encoded outputs of at least this many bytes are written with non-temporal stores (the fp16
// and bf16 encodes), as glibc's memcpy writes large copies: past the caches, a plain store first
// reads the line it writes. The default, 8 MiB, is a quarter of one Zen 4 L3 (32 MiB per eight
// cores): a smaller output, which a caller may still find in the cache, is stored the usual
// way. (The system's figure does not serve: a virtual machine here reports 508 MiB, the whole
// host's.) setNonTemporalBytes(0) restores the default; tests lower it to reach the streaming
// path.
inline constexpr size_t kDefaultNonTemporalBytes = size_t{8} << 20;
inline std::atomic<size_t>& nonTemporalBytesSetting() {
  static std::atomic<size_t> bytes{kDefaultNonTemporalBytes};
  return bytes;
}
inline size_t nonTemporalBytes() { return nonTemporalBytesSetting().load(std::memory_order_relaxed); }
inline void setNonTemporalBytes(size_t bytes) {
  nonTemporalBytesSetting().store(bytes > 0 ? bytes : kDefaultNonTemporalBytes, std::memory_order_relaxed);
}

}  // namespace aps::precision
