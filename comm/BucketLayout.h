#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace aps::comm {

// How gradients are packed into flat buckets, as PyTorch DDP does (Li et al., VLDB 2020):
// parameters are taken in reverse registration order (backward produces the last layers'
// gradients first), consecutive parameters share a bucket until it would exceed the cap,
// the first bucket has a smaller cap so communication starts early, and parameters whose
// wire formats differ never share a bucket (one format per bucket).
class BucketLayout {
 public:
  struct Bucket {
    std::vector<int> params;       // parameter indices, in the order they sit in the bucket
    std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
    int64_t count = 0;             // elements in the flat buffer
    int format = 0;                // the wire-format id shared by its parameters
  };

  static constexpr size_t kDefaultCapBytes = size_t{25} << 20;
  static constexpr size_t kDefaultFirstCapBytes = size_t{1} << 20;

  // counts[p]: elements of parameter p (fp32); formats[p]: its wire-format id.
  BucketLayout(const std::vector<int64_t>& counts, const std::vector<int>& formats, size_t capBytes = kDefaultCapBytes,
               size_t firstCapBytes = kDefaultFirstCapBytes);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int bucketOf(int param) const { return bucketOf_[static_cast<size_t>(param)]; }
  int64_t offsetOf(int param) const { return offsetOf_[static_cast<size_t>(param)]; }
  // The parameter's place among its bucket's parameters (buckets()[bucketOf(p)].params[k] == p).
  size_t slotOf(int param) const { return slotOf_[static_cast<size_t>(param)]; }

 private:
  std::vector<Bucket> buckets_;
  std::vector<int> bucketOf_;
  std::vector<int64_t> offsetOf_;
  std::vector<size_t> slotOf_;
};

}  // namespace aps::comm
