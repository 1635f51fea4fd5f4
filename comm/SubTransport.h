#pragma once

#include "comm/Transport.h"

#include <string>
#include <vector>

namespace aps::comm {

// A world made of some of a parent transport's ranks: rank k here is rank first + k * stride
// of the parent (size of them). The bytes still move through the parent, with the parent's
// rank numbers, so a sub-world works on any transport (the simulator, MPI, the Python
// module's) and a schedule run on it gives the same bits real or simulated. Consecutive
// ranks (stride 1) are a group of hierarchical APS, every stride-th rank its group leaders
// (docs/ALGORITHMS.md, Hierarchical APS).
//
// The ranks of the sub-world that live in this process must be contiguous in its numbering
// (they are for a stride over a contiguous range of local parent ranks); a process may host
// none of them (localRankCount() == 0), and then must not run a schedule on it.
class SubTransport final : public Transport {
 public:
  SubTransport(Transport& parent, int first, int stride, int size);

  std::string transportName() const override;
  int worldSize() const override { return size_; }
  int firstLocalRank() const override { return firstLocal_; }
  int localRankCount() const override { return localCount_; }

  // The parent's number of rank `rank` of this world.
  int parentRank(int rank) const { return first_ + rank * stride_; }
  int stride() const { return stride_; }

  void exchange(std::span<const Message> round) override;
  // Rounds in flight are the parent's, under the parent's tickets.
  ExchangeTicket startExchange(std::span<const Message> round) override;
  bool testExchange(ExchangeTicket ticket) override { return parent_.testExchange(ticket); }
  void waitExchange(ExchangeTicket ticket) override { parent_.waitExchange(ticket); }
  bool sharesMemory() const override { return parent_.sharesMemory(); }

 private:
  std::span<const Message> translate(std::span<const Message> round);

  Transport& parent_;
  int first_, stride_, size_;
  int firstLocal_ = 0, localCount_ = 0;
  std::vector<Message> translated_;
};

}  // namespace aps::comm
