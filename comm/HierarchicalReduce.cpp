#include "comm/HierarchicalReduce.h"

#include "comm/SmallAllReduce.h"
#include "comm/SubTransport.h"
#include "framework/core/Error.h"

#include <chrono>
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

SyncStats reduceBucketHierarchical(const AllReduceAlgorithm& algorithm, const BucketContext& bucket,
                                   const ReducerOptions& options, const precision::EncodeContext& context) {
  const auto start = std::chrono::steady_clock::now();
  Transport& world = *bucket.transport;
  const int ranks = world.worldSize();
  const int size = options.groupSize;
  APS_CHECK(size >= 1 && size <= ranks && ranks % size == 0,
            "comm hierarchical: the group size {} must divide the world size {}", size, ranks);
  APS_CHECK(bucket.data.size() == static_cast<size_t>(world.localRankCount()),
            "comm hierarchical: got {} buffers for {} local ranks", bucket.data.size(), world.localRankCount());
  const int groups = ranks / size;
  const int first = world.firstLocalRank();
  const int local = world.localRankCount();
  const int64_t n = bucket.layout->count;
  const int firstGroup = first / size;
  const int lastGroup = (first + local - 1) / size;

  if (options.worldBeforeReduce) options.worldBeforeReduce(bucket);
  SyncStats stats;
  stats.bytesSent.assign(static_cast<size_t>(local), 0);
  // The local buffers of a sub-world's local ranks, and its bytes into the per-rank counts.
  const auto dataOf = [&](const SubTransport& sub) {
    std::vector<float*> data;
    for (int k = sub.firstLocalRank(); k < sub.firstLocalRank() + sub.localRankCount(); ++k)
      data.push_back(bucket.data[static_cast<size_t>(sub.parentRank(k) - first)]);
    return data;
  };
  const auto addBytes = [&](const SubTransport& sub, int k, uint64_t bytes) {
    stats.bytesSent[static_cast<size_t>(sub.parentRank(k) - first)] += bytes;
  };
  const auto addStats = [&](const SubTransport& sub, const SyncStats& s) {
    for (size_t i = 0; i < s.bytesSent.size(); ++i)
      addBytes(sub, sub.firstLocalRank() + static_cast<int>(i), s.bytesSent[i]);
  };

  // 1. Within each group that has ranks in this process (one after the other: a process
  // hosting several groups, the simulator, runs each group's rounds in turn). Skipped for
  // groups of one rank, unless that rank is the whole world (which still quantises).
  std::vector<uint8_t> groupNonFinite(static_cast<size_t>(lastGroup - firstGroup + 1), 0);
  if (size > 1 || groups == 1) {
    for (int g = firstGroup; g <= lastGroup; ++g) {
      SubTransport group(world, g * size, 1, size);
      const std::vector<float*> data = dataOf(group);
      InputFacts facts;
      BucketContext level{bucket.bucket, bucket.layout, &group, data, bucket.step};
      level.inputs = &facts;
      if (options.beforeReduce) options.beforeReduce(level);
      EncodeObserver* observer = options.encodeObserver ? options.encodeObserver(level) : nullptr;
      const SyncStats s = algorithm.run(group, data, n, groups == 1 ? context : hierarchicalLevelContext(context, 1, g),
                                        observer, false, false, &facts);
      if (options.afterReduce) options.afterReduce(level);
      addStats(group, s);
      groupNonFinite[static_cast<size_t>(g - firstGroup)] = s.nonFinite ? 1 : 0;
    }
  }
  if (groups == 1) {
    stats.nonFinite = groupNonFinite[0] != 0;
    if (options.worldAfterReduce) options.worldAfterReduce(bucket);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return stats;
  }

  // 2. Across the group leaders.
  bool nonFinite = false;  // meaningful where a leader lives
  SubTransport leaders(world, 0, size, groups);
  if (leaders.localRankCount() > 0) {
    const std::vector<float*> data = dataOf(leaders);
    if (size > 1 && algorithm.checksFinite()) {
      // A group's flag (some member's input was NaN/inf, which a saturating codec may have
      // hidden from the sum) must reach every rank: a MAX over the leaders.
      std::vector<float> flags(data.size());
      std::vector<float*> pointers;
      for (size_t i = 0; i < flags.size(); ++i) {
        const int g = leaders.parentRank(leaders.firstLocalRank() + static_cast<int>(i)) / size;
        flags[i] = groupNonFinite[static_cast<size_t>(g - firstGroup)] != 0 ? 1.0f : 0.0f;
        pointers.push_back(&flags[i]);
      }
      smallAllReduce(leaders, pointers, 1, ReduceOp::Max);
      nonFinite = flags[0] != 0.0f;
      for (size_t i = 0; i < flags.size(); ++i)
        addBytes(leaders, leaders.firstLocalRank() + static_cast<int>(i),
                 static_cast<uint64_t>(groups - 1) * sizeof(float));
    }
    InputFacts facts;
    BucketContext level{bucket.bucket, bucket.layout, &leaders, data, bucket.step};
    level.inputs = &facts;
    if (options.leaderBeforeReduce) options.leaderBeforeReduce(level);
    EncodeObserver* observer = options.leaderEncodeObserver ? options.leaderEncodeObserver(level) : nullptr;
    const SyncStats s = algorithm.run(leaders, data, n, size == 1 ? context : hierarchicalLevelContext(context, 2, 0),
                                      observer, false, false, &facts);
    if (options.leaderAfterReduce) options.leaderAfterReduce(level);
    addStats(leaders, s);
    nonFinite = nonFinite || s.nonFinite;
  }

  // 3. Each leader hands the total (raw fp32, the same bits everywhere) to the rest of its
  // group in two rounds, a scatter and an all-gather, so that it sends 2 (G-1)/G of the
  // buffer rather than G-1 copies: first chunk k (of G) and the non-finite flag to member k,
  // then every rank sends its chunk to every member that lacks it.
  std::vector<uint8_t> received(static_cast<size_t>(local), 0);
  if (size > 1) {
    const uint8_t flag = nonFinite ? 1 : 0;
    const auto chunkBegin = [&](int c) { return n * c / size; };
    const auto chunkBytes = [&](int c) {
      return static_cast<size_t>(chunkBegin(c + 1) - chunkBegin(c)) * sizeof(float);
    };
    for (int g = firstGroup; g <= lastGroup; ++g) {
      SubTransport group(world, g * size, 1, size);
      const auto localData = [&](int k) { return bucket.data[static_cast<size_t>(group.parentRank(k) - first)]; };
      // Chunk c of rank k's buffer where k is local, else null (the transport ignores it).
      const auto chunkOf = [&](int k, int c) { return group.isLocal(k) ? localData(k) + chunkBegin(c) : nullptr; };
      std::vector<Message> round;
      const auto add = [&](int src, int dst, const void* sendData, void* recvData, size_t bytes) {
        if (bytes == 0 || (!group.isLocal(src) && !group.isLocal(dst))) return;
        round.push_back({src, dst, sendData, recvData, bytes});
        if (group.isLocal(src)) addBytes(group, src, bytes);
      };
      for (int k = 1; k < size; ++k) {
        add(0, k, chunkOf(0, k), chunkOf(k, k), chunkBytes(k));
        add(0, k, group.isLocal(0) ? &flag : nullptr,
            group.isLocal(k) ? &received[static_cast<size_t>(group.parentRank(k) - first)] : nullptr, 1);
      }
      group.exchange(round);
      round.clear();
      for (int src = 0; src < size; ++src)
        for (int dst = 1; dst < size; ++dst)
          if (dst != src) add(src, dst, chunkOf(src, src), chunkOf(dst, src), chunkBytes(src));
      group.exchange(round);
    }
  }
  stats.nonFinite = first % size == 0 ? nonFinite : received[0] != 0;
  if (options.worldAfterReduce) options.worldAfterReduce(bucket);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace aps::comm
