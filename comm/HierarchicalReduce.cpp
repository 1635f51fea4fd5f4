#include "comm/HierarchicalReduce.h"

#include "comm/SmallAllReduce.h"
#include "comm/SubTransport.h"
#include "framework/core/Error.h"

#include <chrono>
#include <optional>
#include <vector>

namespace aps::comm {

precision::EncodeContext hierarchicalLevelContext(const precision::EncodeContext& base, int level, int index) {
  // splitmix64 finaliser over (stream, level, index): distinct streams per level and group.
  uint64_t z = base.stream ^ (static_cast<uint64_t>(level) << 56) ^ (static_cast<uint64_t>(index) << 24);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return {base.seed, z, base.offset};
}

namespace {

// One bucket's hierarchical reduction: the plain schedule is run(), its three levels the
// methods below it.
class HierarchicalPass {
 public:
  HierarchicalPass(const AllReduceAlgorithm& algorithm, const BucketContext& bucket, const ReducerOptions& options,
                   const precision::EncodeContext& context)
      : algorithm_(algorithm),
        bucket_(bucket),
        options_(options),
        context_(context),
        world_(*bucket.transport),
        agreements_(bucket.agreementTransport()),
        ranks_(world_.worldSize()),
        size_(options.groupSize),
        groups_(size_ >= 1 ? ranks_ / size_ : 0),
        first_(world_.firstLocalRank()),
        local_(world_.localRankCount()),
        n_(bucket.layout->count),
        firstGroup_(size_ >= 1 ? first_ / size_ : 0),
        lastGroup_(size_ >= 1 ? (first_ + local_ - 1) / size_ : 0) {
    APS_CHECK(size_ >= 1 && size_ <= ranks_ && ranks_ % size_ == 0,
              "comm hierarchical: the group size {} must divide the world size {}", size_, ranks_);
    APS_CHECK(bucket.data.size() == static_cast<size_t>(local_), "comm hierarchical: got {} buffers for {} local ranks",
              bucket.data.size(), local_);
    APS_CHECK(agreements_.worldSize() == ranks_ && agreements_.firstLocalRank() == first_ &&
                  agreements_.localRankCount() == local_,
              "comm hierarchical: the agreements' transport must hold the same ranks as the all-reduce's");
    stats_.bytesSent.assign(static_cast<size_t>(local_), 0);
  }

  SyncStats run() {
    const auto start = std::chrono::steady_clock::now();
    if (options_.worldHook) options_.worldHook->beforeReduce(bucket_);
    // Groups of one rank skip the first level, unless that rank is the whole world (which
    // still quantises).
    if (size_ > 1 || groups_ == 1) reduceWithinGroups();
    if (groups_ == 1) {
      stats_.nonFinite = groupNonFinite_[0] != 0;
    } else {
      const bool nonFinite = reduceAcrossLeaders();
      if (size_ > 1) broadcastWithinGroups(nonFinite);
      stats_.nonFinite = first_ % size_ == 0 ? nonFinite : received_[0] != 0;
    }
    if (options_.worldHook) options_.worldHook->afterReduce(bucket_);
    stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats_;
  }

 private:
  // The local buffers of a sub-world's local ranks, and its bytes into the per-rank counts.
  std::vector<float*> dataOf(const SubTransport& sub) const {
    std::vector<float*> data;
    for (int k = sub.firstLocalRank(); k < sub.firstLocalRank() + sub.localRankCount(); ++k)
      data.push_back(bucket_.data[static_cast<size_t>(sub.parentRank(k) - first_)]);
    return data;
  }
  void addBytes(const SubTransport& sub, int k, uint64_t bytes) {
    stats_.bytesSent[static_cast<size_t>(sub.parentRank(k) - first_)] += bytes;
  }
  void addStats(const SubTransport& sub, const SyncStats& s) {
    for (size_t i = 0; i < s.bytesSent.size(); ++i)
      addBytes(sub, sub.firstLocalRank() + static_cast<int>(i), s.bytesSent[i]);
  }

  // The same sub-world of the agreements' transport (host memory: the hooks' small agreements
  // and the flags), where it is not the all-reduce's own.
  std::optional<SubTransport> agreementsOf(const SubTransport& sub) {
    if (&agreements_ == &world_) return std::nullopt;
    return std::make_optional<SubTransport>(agreements_, sub.parentRank(0), sub.stride(), sub.worldSize());
  }

  // One level's reduction over sub: its hook's beforeReduce, the algorithm, its afterReduce.
  SyncStats reduceLevel(SubTransport& sub, const std::vector<float*>& data, ReductionHook* hook,
                        const precision::EncodeContext& context) {
    InputFacts facts;
    std::optional<SubTransport> agree = agreementsOf(sub);
    BucketContext level{bucket_.bucket, bucket_.layout, &sub, data, bucket_.step};
    level.inputs = &facts;
    level.device = bucket_.device;
    if (agree) level.agreements = &*agree;
    if (hook) hook->beforeReduce(level);
    EncodeObserver* observer = hook ? hook->encodeObserver(level) : nullptr;
    const SyncStats s = algorithm_.run(sub, data, n_, context, observer, false, false, &facts);
    if (hook) hook->afterReduce(level);
    addStats(sub, s);
    return s;
  }

  // 1. Within each group that has ranks in this process (one after the other: a process
  // hosting several groups, the simulator, runs each group's rounds in turn).
  void reduceWithinGroups() {
    groupNonFinite_.assign(static_cast<size_t>(lastGroup_ - firstGroup_ + 1), 0);
    for (int g = firstGroup_; g <= lastGroup_; ++g) {
      SubTransport group(world_, g * size_, 1, size_);
      const SyncStats s = reduceLevel(group, dataOf(group), options_.hook,
                                      groups_ == 1 ? context_ : hierarchicalLevelContext(context_, 1, g));
      groupNonFinite_[static_cast<size_t>(g - firstGroup_)] = s.nonFinite ? 1 : 0;
    }
  }

  // 2. Across the group leaders; returns whether some input was not finite (meaningful where
  // a leader lives).
  bool reduceAcrossLeaders() {
    SubTransport leaders(world_, 0, size_, groups_);
    if (leaders.localRankCount() == 0) return false;
    const std::vector<float*> data = dataOf(leaders);
    const bool groupsNonFinite = size_ > 1 && algorithm_.checksFinite() && agreeGroupsNonFinite(leaders, data.size());
    const SyncStats s = reduceLevel(leaders, data, options_.leaderHook,
                                    size_ == 1 ? context_ : hierarchicalLevelContext(context_, 2, 0));
    return groupsNonFinite || s.nonFinite;
  }

  // A group's flag (some member's input was NaN/inf, which a saturating codec may have hidden
  // from the sum) must reach every rank: a MAX over the leaders.
  bool agreeGroupsNonFinite(SubTransport& leaders, size_t count) {
    std::vector<float> flags(count);
    std::vector<float*> pointers;
    for (size_t i = 0; i < flags.size(); ++i) {
      const int g = leaders.parentRank(leaders.firstLocalRank() + static_cast<int>(i)) / size_;
      flags[i] = groupNonFinite_[static_cast<size_t>(g - firstGroup_)] != 0 ? 1.0f : 0.0f;
      pointers.push_back(&flags[i]);
    }
    std::optional<SubTransport> agree = agreementsOf(leaders);
    smallAllReduce(agree ? *agree : leaders, pointers, 1, ReduceOp::Max);
    for (size_t i = 0; i < flags.size(); ++i)
      addBytes(leaders, leaders.firstLocalRank() + static_cast<int>(i),
               static_cast<uint64_t>(groups_ - 1) * sizeof(float));
    return flags[0] != 0.0f;
  }

  // 3. Each leader hands the total (raw fp32, the same bits everywhere) to the rest of its
  // group in two rounds, a scatter and an all-gather, so that it sends 2 (G-1)/G of the
  // buffer rather than G-1 copies: first chunk k (of G) and the non-finite flag to member k,
  // then every rank sends its chunk to every member that lacks it. The flags go in a round of
  // their own, through the agreements' transport (host memory).
  void broadcastWithinGroups(bool nonFinite) {
    received_.assign(static_cast<size_t>(local_), 0);
    const uint8_t flag = nonFinite ? 1 : 0;
    const auto chunkBegin = [&](int c) { return n_ * c / size_; };
    const auto chunkBytes = [&](int c) {
      return static_cast<size_t>(chunkBegin(c + 1) - chunkBegin(c)) * sizeof(float);
    };
    for (int g = firstGroup_; g <= lastGroup_; ++g) {
      SubTransport group(world_, g * size_, 1, size_);
      std::optional<SubTransport> agree = agreementsOf(group);
      const auto localData = [&](int k) { return bucket_.data[static_cast<size_t>(group.parentRank(k) - first_)]; };
      // Chunk c of rank k's buffer where k is local, else null (the transport ignores it).
      const auto chunkOf = [&](int k, int c) { return group.isLocal(k) ? localData(k) + chunkBegin(c) : nullptr; };
      std::vector<Message> round;
      const auto add = [&](int src, int dst, const void* sendData, void* recvData, size_t bytes) {
        if (bytes == 0 || (!group.isLocal(src) && !group.isLocal(dst))) return;
        round.push_back({src, dst, sendData, recvData, bytes});
        if (group.isLocal(src)) addBytes(group, src, bytes);
      };
      for (int k = 1; k < size_; ++k)
        add(0, k, group.isLocal(0) ? &flag : nullptr,
            group.isLocal(k) ? &received_[static_cast<size_t>(group.parentRank(k) - first_)] : nullptr, 1);
      (agree ? static_cast<Transport&>(*agree) : group).exchange(round);
      round.clear();
      for (int k = 1; k < size_; ++k) add(0, k, chunkOf(0, k), chunkOf(k, k), chunkBytes(k));
      group.exchange(round);
      round.clear();
      for (int src = 0; src < size_; ++src)
        for (int dst = 1; dst < size_; ++dst)
          if (dst != src) add(src, dst, chunkOf(src, src), chunkOf(dst, src), chunkBytes(src));
      group.exchange(round);
    }
  }

  const AllReduceAlgorithm& algorithm_;
  const BucketContext& bucket_;
  const ReducerOptions& options_;
  const precision::EncodeContext context_;
  Transport& world_;
  Transport& agreements_;  // BucketContext::agreementTransport(): world_ itself, or host memory beside it
  const int ranks_, size_, groups_, first_, local_;
  const int64_t n_;
  const int firstGroup_, lastGroup_;
  SyncStats stats_;
  std::vector<uint8_t> groupNonFinite_;  // per local group: some member's input was not finite
  std::vector<uint8_t> received_;        // per local rank: the flag its leader sent
};

}  // namespace

SyncStats reduceBucketHierarchical(const AllReduceAlgorithm& algorithm, const BucketContext& bucket,
                                   const ReducerOptions& options, const precision::EncodeContext& context) {
  return HierarchicalPass(algorithm, bucket, options, context).run();
}

}  // namespace aps::comm
