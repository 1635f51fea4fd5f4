#include "framework/autograd/Node.h"

#include <atomic>

namespace aps::autograd {

namespace {
std::atomic<uint64_t> gNextSequenceNr{0};
}

Node::Node(std::string name, uint32_t numOutputs)
    : name_(std::move(name)), numOutputs_(numOutputs), sequenceNr_(gNextSequenceNr.fetch_add(1)) {}

// Releasing the last reference to a long chain would otherwise destroy it recursively (one
// stack frame per node; a 10,000-deep graph overflows sanitizer stacks). Nested releases
// park their edges on a thread-local list that the outermost destructor drains in a loop.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (auto& edge : next_) {
    if (edge.fn) pending.push_back(std::move(edge.fn));
  }
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    node.reset();
  }
  draining = false;
}

}  // namespace aps::autograd
