#include "framework/train/TensorBoard.h"

#include "framework/core/Error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>

namespace aps::train {

namespace {

constexpr std::array<uint32_t, 256> crcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

// TFRecord masks its CRCs (a CRC of data holding CRCs is weak otherwise).
uint32_t maskedCrc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

template <typename T>
void appendLittleEndian(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "event files are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A length-delimited field (wire type 2): strings and nested messages.
void appendBytesField(std::string& out, int field, const std::string& bytes) {
  appendVarint(out, static_cast<uint64_t>(field) << 3 | 2);
  appendVarint(out, bytes.size());
  out += bytes;
}

// An Event's wall_time (field 1, a double: wire type 1) and step (field 2, a varint).
std::string eventHeader(double wallTime, int64_t step) {
  std::string event;
  appendVarint(event, 1 << 3 | 1);
  appendLittleEndian(event, wallTime);
  appendVarint(event, 2 << 3 | 0);
  appendVarint(event, static_cast<uint64_t>(step));
  return event;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static constexpr auto table = crcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  APS_CHECK(!ec && std::filesystem::is_directory(dir), "logging.tensorboard_dir '{}' cannot be created: {}", dir,
            ec ? ec.message() : "a file of that name exists");
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const double start = now();
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(start), host))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  APS_CHECK(out_.good(), "cannot write the TensorBoard event file '{}'", path_);
  std::string event = eventHeader(start, 0);
  appendBytesField(event, 3, "brain.Event:2");
  record(event);
  flush();
}

void EventFileWriter::scalar(const std::string& tag, double value, int64_t step, double wallTime) {
  std::string summaryValue;
  appendBytesField(summaryValue, 1, tag);
  appendVarint(summaryValue, 2 << 3 | 5);  // simple_value: a float (wire type 5)
  appendLittleEndian(summaryValue, static_cast<float>(value));
  std::string summary;
  appendBytesField(summary, 1, summaryValue);
  std::string event = eventHeader(wallTime, step);
  appendBytesField(event, 5, summary);
  record(event);
}

void EventFileWriter::record(const std::string& event) {
  std::string framed;
  const auto length = static_cast<uint64_t>(event.size());
  appendLittleEndian(framed, length);
  appendLittleEndian(framed, maskedCrc(framed.data(), sizeof(length)));
  framed += event;
  appendLittleEndian(framed, maskedCrc(event.data(), event.size()));
  out_.write(framed.data(), static_cast<std::streamsize>(framed.size()));
  APS_CHECK(out_.good(), "cannot write the TensorBoard event file '{}' (disk full?)", path_);
}

}  // namespace aps::train
