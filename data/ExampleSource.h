#pragma once

#include "data/Example.h"

#include <cstdint>
#include <string>

namespace aps::data {

// Where examples come from: a file format or a folder layout, before any transform. read()
// must be safe to call from several loader threads at once, and throws aps::Error naming the
// file when the data behind an index is bad.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  virtual int64_t size() const = 0;
  virtual int64_t numClasses() const = 0;
  // True when examples carry a label map (segmentation) instead of a class label.
  virtual bool isSegmentation() const = 0;
  virtual void read(int64_t index, Example& out) const = 0;
  // Where example `index` comes from (a file, or file and record), for error messages.
  virtual std::string describe(int64_t index) const = 0;
};

}  // namespace aps::data
