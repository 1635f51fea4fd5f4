#pragma once

#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace aps::precision {

// How far ahead of a codec's streaming loop its input is prefetched. On the 2-core AMD EPYC
// (Zen 4) the hardware prefetcher alone left the fp16 and bf16 encodes at 0.8x of memcpy;
// asking for the lines 2 KiB ahead, with one load per input vector, brought them to 1.0x
// (docs/PERFORMANCE.md, "2026-12-05, morning"). 1 KiB gained less, 4 KiB the same. The byte
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

}  // namespace aps::precision
