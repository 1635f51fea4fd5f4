#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace aps::train {

// TensorBoard's event file, written without TensorFlow: TFRecord framing (length, masked
// CRC-32C of the length, the record, masked CRC-32C of the record) around Event protocol
// buffers (tensorflow/core/util/event.proto: wall_time = 1, step = 2, file_version = 3,
// summary = 5; a Summary's values = 1; a Value's tag = 1, simple_value = 2), encoded by hand:
// the first record names the file version ("brain.Event:2"), then one scalar per record.
// `tensorboard --logdir DIR` reads it as it grows.
class EventFileWriter {
 public:
  // Creates `dir` and in it events.out.tfevents.<seconds since 1970>.<host name>; throws
  // aps::Error naming the folder when it cannot.
  explicit EventFileWriter(const std::string& dir);

  void scalar(const std::string& tag, double value, int64_t step, double wallTime);
  void flush() { out_.flush(); }
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord's checksums use.
uint32_t crc32c(const void* data, size_t size);

}  // namespace aps::train
