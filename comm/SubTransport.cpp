#include "comm/SubTransport.h"

#include "framework/core/Error.h"

#include <fmt/format.h>

namespace aps::comm {

SubTransport::SubTransport(Transport& parent, int first, int stride, int size)
    : parent_(parent), first_(first), stride_(stride), size_(size) {
  APS_CHECK(size >= 1 && stride >= 1 && first >= 0 && first + (size - 1) * stride < parent.worldSize(),
            "comm sub-world: ranks {} + k * {} for k < {} do not lie in a world of {}", first, stride, size,
            parent.worldSize());
  int last = -1;
  for (int k = 0; k < size; ++k) {
    if (!parent.isLocal(parentRank(k))) continue;
    if (localCount_ == 0) firstLocal_ = k;
    APS_CHECK(last < 0 || last == k - 1, "comm sub-world: the local ranks of this process are not contiguous in it");
    last = k;
    ++localCount_;
  }
}

std::string SubTransport::transportName() const {
  return fmt::format("{}[{}:{}:{}]", parent_.transportName(), first_, stride_, size_);
}

std::span<const Message> SubTransport::translate(std::span<const Message> round) {
  translated_.assign(round.begin(), round.end());
  for (Message& m : translated_) {
    APS_ASSERT(m.src >= 0 && m.src < size_ && m.dst >= 0 && m.dst < size_);
    m.src = parentRank(m.src);
    m.dst = parentRank(m.dst);
  }
  return translated_;
}

void SubTransport::exchange(std::span<const Message> round) { parent_.exchange(translate(round)); }

ExchangeTicket SubTransport::startExchange(std::span<const Message> round) {
  return parent_.startExchange(translate(round));
}

}  // namespace aps::comm
