#include "comm/BucketLayout.h"

#include "framework/core/Error.h"

namespace aps::comm {

BucketLayout::BucketLayout(const std::vector<int64_t>& counts, const std::vector<int>& formats, size_t capBytes,
                           size_t firstCapBytes)
    : bucketOf_(counts.size(), -1), offsetOf_(counts.size(), 0), slotOf_(counts.size(), 0) {
  APS_CHECK(counts.size() == formats.size(), "comm buckets: {} parameter sizes but {} formats", counts.size(),
            formats.size());
  APS_CHECK(capBytes > 0 && firstCapBytes > 0, "comm buckets: bucket caps must be positive");
  for (int p = static_cast<int>(counts.size()) - 1; p >= 0; --p) {
    const auto pu = static_cast<size_t>(p);
    APS_CHECK(counts[pu] >= 0, "comm buckets: parameter {} has negative size {}", p, counts[pu]);
    bool open = !buckets_.empty();
    if (open) {
      // A parameter larger than the cap gets a bucket of its own.
      const Bucket& b = buckets_.back();
      const size_t cap = buckets_.size() == 1 ? firstCapBytes : capBytes;
      const bool fits = static_cast<size_t>(b.count + counts[pu]) * sizeof(float) <= cap;
      open = b.format == formats[pu] && (fits || b.count == 0);
    }
    if (!open) buckets_.push_back({{}, {}, 0, formats[pu]});
    Bucket& b = buckets_.back();
    bucketOf_[pu] = static_cast<int>(buckets_.size()) - 1;
    offsetOf_[pu] = b.count;
    slotOf_[pu] = b.params.size();
    b.params.push_back(p);
    b.offsets.push_back(b.count);
    b.count += counts[pu];
  }
}

}  // namespace aps::comm
