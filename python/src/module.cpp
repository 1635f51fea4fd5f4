// The Python module `aps._aps` (pybind11): aps's formats, codecs and APS on float32 NumPy
// arrays, and the bucket reduction behind the PyTorch DDP comm hook (python/aps/torch.py).
// python/aps/__init__.py wraps these functions for torch tensors and other dtypes; _aps.pyi
// holds their signatures. Every function calls the same C++ code as aps_train and aps_formats,
// so results are bit-identical to theirs.
#include "comm/AllReduceAlgorithm.h"
#include "comm/BucketScaling.h"
#include "comm/GradientReducer.h"
#include "comm/Transport.h"
#include "framework/core/Error.h"
#include "framework/core/Version.h"
#include "precision/ApsScaler.h"
#include "precision/BlockScaledCodec.h"
#include "precision/CodecSpec.h"
#include "precision/FloatFormat.h"
#include "precision/HybridPolicy.h"
#include "precision/Quantizer.h"
#include "framework/numerics/RoundingMode.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace aps::python {
namespace {

using precision::FloatFormat;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A preset; for a name that is a codec rather than a format (an MX type, Dettmers' types, a
// spec with ':rounding' or '/block'), an error that says which function takes it.
FloatFormat presetOrHint(const std::string& name) {
  std::optional<precision::CodecSpec> spec;
  try {
    return FloatFormat::preset(name);
  } catch (const Error&) {
    try {
      spec = precision::CodecSpec::parse(name);
    } catch (const Error&) {
    }
    if (!spec) throw;
  }
  using Kind = precision::CodecSpec::Kind;
  if (spec->kind == Kind::BlockScaled) {
    const std::string& element = spec->format.name;
    APS_FAIL(
        "format '{}' is a block-scaled codec (elements {} with a power-of-two scale per {} values), not a float "
        "format: aps.block_quantize(x, '{}', {}) gives the values it keeps, aps.encode(x, '{}') its wire bytes",
        name, element, spec->blockSize, element, spec->blockSize, name);
  }
  if (spec->kind != Kind::Float) {
    APS_FAIL(
        "format '{}' is one of Dettmers' 8-bit codecs, not a float format: aps.decode(aps.encode(x, '{}'), '{}', "
        "x.size) gives the values it keeps",
        name, name, name);
  }
  APS_FAIL("format '{}' is a codec spec, not a format: pass the format '{}' and rounding='{}'", name, spec->format.name,
           precision::roundingModeName(spec->rounding));
}

// A format from a preset name, a dict of format keys (as in YAML), or a Format.
FloatFormat toFormat(const py::object& spec) {
  if (py::isinstance<FloatFormat>(spec)) return spec.cast<FloatFormat>();
  if (py::isinstance<py::str>(spec)) return presetOrHint(spec.cast<std::string>());
  if (py::isinstance<py::dict>(spec)) {
    std::map<std::string, std::string> fields;
    for (const auto& [key, value] : spec.cast<py::dict>()) {
      const py::object v = py::reinterpret_borrow<py::object>(value);
      fields[py::str(key)] =
          py::isinstance<py::bool_>(v) ? (v.cast<bool>() ? "true" : "false") : std::string(py::str(v));
    }
    return FloatFormat::fromMap(fields);
  }
  throw py::type_error("aps: a format is a preset name (str), a dict of format keys or an aps.Format, not " +
                       std::string(py::str(py::type::of(spec))));
}

// A new float32 array of x's shape.
FloatArray likeShape(const FloatArray& x) {
  return FloatArray(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
}

precision::EncodeContext context(uint64_t seed, uint64_t stream, int64_t offset) { return {seed, stream, offset}; }

FloatArray quantize(const FloatArray& x, const py::object& format, const std::string& rounding, uint64_t seed,
                    uint64_t stream) {
  const precision::Quantizer q(toFormat(format));
  FloatArray out = likeShape(x);
  q.quantize(x.data(), out.mutable_data(), x.size(), precision::parseRoundingMode(rounding), context(seed, stream, 0));
  return out;
}

// x with a power-of-two scale per block of blockSize values (flat order), as the block-scaled
// codec sends it: the decoded values.
FloatArray blockQuantize(const FloatArray& x, const py::object& format, int64_t blockSize, const std::string& rounding,
                         uint64_t seed, uint64_t stream) {
  const precision::BlockScaledCodec codec(toFormat(format), precision::parseRoundingMode(rounding), blockSize);
  std::vector<uint8_t> wire(codec.encodedBytes(x.size()));
  codec.encode(x.data(), x.size(), wire.data(), context(seed, stream, 0));
  FloatArray out = likeShape(x);
  codec.decode(wire.data(), x.size(), out.mutable_data());
  return out;
}

py::bytes encode(const FloatArray& x, const std::string& codec, uint64_t seed, uint64_t stream) {
  const auto c = precision::makeCodec(codec);
  std::string bytes(c->encodedBytes(x.size()), '\0');
  c->encode(x.data(), x.size(), reinterpret_cast<uint8_t*>(bytes.data()), context(seed, stream, 0));
  return py::bytes(bytes);
}

// The bytes of a C-contiguous buffer of one-byte items (bytes, bytearray, memoryview, a uint8
// NumPy array), held while it lives.
class ByteView {
 public:
  explicit ByteView(const py::object& data) {
    if (PyObject_GetBuffer(data.ptr(), &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw py::type_error(
          "aps.decode: data must be a contiguous bytes-like object (bytes, bytearray, memoryview, "
          "a uint8 NumPy array or torch tensor), not " +
          std::string(py::str(py::type::of(data))));
    }
    if (view_.itemsize != 1) {
      const std::string format = view_.format != nullptr ? view_.format : "?";
      const auto itemsize = view_.itemsize;
      PyBuffer_Release(&view_);
      throw py::type_error("aps.decode: data must hold bytes (uint8), not items of " + std::to_string(itemsize) +
                           " bytes (buffer format '" + format + "')");
    }
  }
  ByteView(const ByteView&) = delete;
  ByteView& operator=(const ByteView&) = delete;
  ~ByteView() { PyBuffer_Release(&view_); }
  std::string_view bytes() const { return {static_cast<const char*>(view_.buf), static_cast<size_t>(view_.len)}; }

 private:
  Py_buffer view_{};
};

FloatArray decode(const py::object& data, const std::string& codec, int64_t n) {
  const auto c = precision::makeCodec(codec);
  APS_CHECK(n >= 0, "aps.decode: n = {} is negative", n);
  const ByteView view(data);
  const std::string_view bytes = view.bytes();
  APS_CHECK(bytes.size() == c->encodedBytes(n), "aps.decode: {} values of '{}' take {} bytes, got {} bytes", n,
            c->name(), c->encodedBytes(n), bytes.size());
  FloatArray out(n);
  c->decode(reinterpret_cast<const uint8_t*>(bytes.data()), n, out.mutable_data());
  return out;
}

// Every code's value (index = code), for formats of at most 16 bits.
FloatArray formatValues(const FloatFormat& f) {
  APS_CHECK(f.bits() <= 16, "aps.Format.values: {} has {} bits; tables exist for up to 16", f.name, f.bits());
  const int64_t codes = int64_t{1} << f.bits();
  FloatArray out(codes);
  for (int64_t c = 0; c < codes; ++c) out.mutable_data()[c] = f.decode(static_cast<uint32_t>(c));
  return out;
}

// APS shifts of one process's layers (Han, Demmel, You): with world_size > 1 the caller
// passes the MAX over ranks itself, so this is the single-process form.
std::vector<int> apsShifts(const std::vector<FloatArray>& layers, const py::object& format, int worldSize,
                           const std::string& mode) {
  const precision::ApsScaler scaler(toFormat(format), worldSize, precision::parseScalingMode(mode));
  std::vector<precision::LayerGradient> views;
  for (const auto& l : layers) views.push_back({l.data(), static_cast<int64_t>(l.size())});
  return scaler.shifts(views, [](float*, int64_t) {}).shift;
}

// A Transport whose rounds Python delivers: exchange(messages) gets (src, dst, send, recv)
// tuples, send and recv being writable memoryviews of the local side (None otherwise).
class PyTransport : public comm::Transport {
 public:
  PyTransport(int rank, int world, py::object exchange) : rank_(rank), world_(world), exchange_(std::move(exchange)) {
    APS_CHECK(world >= 1 && rank >= 0 && rank < world, "aps transport: rank {} of a world of {}", rank, world);
  }
  std::string transportName() const override { return "python"; }
  int worldSize() const override { return world_; }
  int firstLocalRank() const override { return rank_; }
  int localRankCount() const override { return 1; }
  // Called by the reducer with the GIL released (BucketReducer::reduce): takes it for Python.
  void exchange(std::span<const comm::Message> round) override {
    const py::gil_scoped_acquire gil;
    py::list messages;
    const auto view = [](const void* p, size_t bytes) -> py::object {
      if (p == nullptr) return py::none();
      return py::memoryview::from_memory(const_cast<void*>(p), static_cast<py::ssize_t>(bytes), false);
    };
    for (const comm::Message& m : round) {
      messages.append(py::make_tuple(m.src, m.dst, view(isLocal(m.src) ? m.sendData : nullptr, m.bytes),
                                     view(isLocal(m.dst) ? m.recvData : nullptr, m.bytes)));
    }
    exchange_(messages);
  }

 private:
  int rank_, world_;
  py::object exchange_;
};

// The reduction of a PyTorch DDP bucket with aps's numerics: the same hooks (error feedback,
// APS or FP8-LM scaling, statistics) and the same all-reduce schedule as aps_train's
// GradientSync, through comm::reduceBucket. Parameters are identified by ids the caller keeps
// stable across steps (their per-layer state: residuals, statistics). codecs[0] is the wire
// format of every parameter; hybrid precision's rules add codecs[1...], and reduce() says per
// parameter which one it travels in (a bucket of several is reduced as one sub-bucket each).
class BucketReducer {
 public:
  BucketReducer(std::shared_ptr<PyTransport> transport, const std::vector<std::string>& codecs,
                const std::string& scaling, const std::string& algorithm, bool errorFeedback, uint64_t seed,
                int maxParameters, int64_t blockSize)
      : transport_(std::move(transport)), maxParameters_(maxParameters) {
    APS_CHECK(maxParameters > 0, "aps comm hook: max_parameters = {} must be positive", maxParameters);
    APS_CHECK(!codecs.empty(), "aps comm hook: no wire format");
    const auto mode = precision::parseScalingMode(scaling);
    comm::AllReduceOptions reduce;
    reduce.kind = comm::parseAllReduceKind(algorithm);
    std::vector<comm::BucketScaling::FormatScaling> perFormat;
    using Kind = precision::CodecSpec::Kind;
    for (size_t f = 0; f < codecs.size(); ++f) {
      precision::CodecSpec spec = precision::CodecSpec::parse(codecs[f]);
      if (mode == precision::ScalingMode::Block) spec = spec.withBlocks(blockSize);  // the scales are the codec's
      const bool hooks =
          errorFeedback || (mode != precision::ScalingMode::None && mode != precision::ScalingMode::Block);
      if (f == 0) {
        const bool lowPrecision = spec.kind == Kind::Float && !spec.format.isFp32();
        APS_CHECK(lowPrecision || !hooks,
                  "aps comm hook: scaling = '{}' and error_feedback apply to float formats below fp32 without block "
                  "scales, not '{}'",
                  scaling, codecs[f]);
      } else {
        // As aps_train's hybrid rules (framework/train/GradientSync.cpp).
        APS_CHECK(spec.kind == Kind::Float || (!errorFeedback && mode != precision::ScalingMode::Fp8Lm),
                  "aps comm hook: hybrid format '{}': error_feedback and scaling = autoscale need float wire formats "
                  "without block scales",
                  codecs[f]);
        APS_CHECK(
            spec.kind != Kind::BlockScaled || mode == precision::ScalingMode::None ||
                mode == precision::ScalingMode::Block,
            "aps comm hook: hybrid format '{}' carries its own scales; scaling = '{}' does not apply (use none or "
            "block)",
            codecs[f], scaling);
      }
      algorithms_.push_back(comm::makeAllReduce(reduce, precision::makeCodec(spec)));
      perFormat.push_back(
          comm::BucketScaling::FormatScaling::forSpec(spec, mode, transport_->worldSize(), errorFeedback));
    }
    scaling_ = std::make_unique<comm::BucketScaling>(perFormat, static_cast<size_t>(maxParameters), 1);
    options_.average = true;
    options_.seed = seed;
    scaling_->install(options_);
  }

  // Reduces `flat` in place (the bucket's parameters at `offsets`, identified by `params`, in
  // the codecs `formats`: indices into the constructor's codecs, empty: all the first) and
  // returns the bytes this rank sent and whether some rank's gradient was not finite.
  py::dict reduce(py::array_t<float, py::array::c_style> flat, const std::vector<int>& params,
                  const std::vector<int64_t>& offsets, int bucket, uint64_t step, std::vector<int> formats) {
    APS_CHECK(params.size() == offsets.size() && !params.empty(), "aps comm hook: {} parameter ids for {} offsets",
              params.size(), offsets.size());
    if (formats.empty()) formats.assign(params.size(), 0);
    APS_CHECK(formats.size() == params.size(), "aps comm hook: {} formats for {} parameters", formats.size(),
              params.size());
    const auto count = static_cast<int64_t>(flat.size());
    for (size_t k = 0; k < params.size(); ++k) {
      APS_CHECK(params[k] >= 0 && params[k] < maxParameters_,
                "aps comm hook: parameter id {} is outside [0, max_parameters = {}); raise max_parameters", params[k],
                maxParameters_);
      APS_CHECK(formats[k] >= 0 && static_cast<size_t>(formats[k]) < algorithms_.size(),
                "aps comm hook: format {} of {}", formats[k], algorithms_.size());
      APS_CHECK(offsets[k] >= 0 && offsets[k] <= count && (k == 0 || offsets[k] > offsets[k - 1]),
                "aps comm hook: offsets must increase within the bucket of {} values", count);
    }
    float* data = flat.mutable_data();
    comm::SyncStats total;
    {
      // Encoding, decoding and summing run without the GIL (the DDP hook's worker thread
      // overlaps them with backward); the transport takes it back for each exchange round.
      const py::gil_scoped_release released;
      const bool mixed = std::any_of(formats.begin(), formats.end(), [&](int f) { return f != formats[0]; });
      if (!mixed) {
        comm::BucketLayout::Bucket layout{params, offsets, count, formats[0]};
        total = comm::reduceBucket(*algorithms_[formats[0]], {bucket, &layout, transport_.get(), {&data, 1}, step},
                                   options_);
      } else {
        // One sub-bucket per codec, its parameters gathered in bucket order; ids apart from the
        // single-format buckets' so stochastic rounding's streams stay distinct.
        const auto formatCount = static_cast<int>(algorithms_.size());
        total.bytesSent.assign(1, 0);
        for (int f = 0; f < formatCount; ++f) {
          comm::BucketLayout::Bucket layout;
          layout.format = f;
          std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) in flat
          for (size_t k = 0; k < params.size(); ++k) {
            if (formats[k] != f) continue;
            const int64_t end = k + 1 < params.size() ? offsets[k + 1] : count;
            layout.params.push_back(params[k]);
            layout.offsets.push_back(layout.count);
            layout.count += end - offsets[k];
            ranges.emplace_back(offsets[k], end);
          }
          if (layout.params.empty()) continue;
          std::vector<float> sub(static_cast<size_t>(layout.count));
          int64_t at = 0;
          for (const auto& [begin, end] : ranges) {
            std::copy(data + begin, data + end, sub.data() + at);
            at += end - begin;
          }
          float* subData = sub.data();
          const int id = (1 << 20) + bucket * formatCount + f;
          const comm::SyncStats sync =
              comm::reduceBucket(*algorithms_[f], {id, &layout, transport_.get(), {&subData, 1}, step}, options_);
          at = 0;
          for (const auto& [begin, end] : ranges) {
            std::copy(sub.data() + at, sub.data() + at + (end - begin), data + begin);
            at += end - begin;
          }
          if (!sync.bytesSent.empty()) total.bytesSent[0] += sync.bytesSent[0];
          total.nonFinite = total.nonFinite || sync.nonFinite;
        }
      }
    }
    py::dict out;
    out["bytes_sent"] = total.bytesSent.empty() ? 0 : total.bytesSent[0];
    out["non_finite"] = total.nonFinite;
    return out;
  }

  // After a step's last bucket: FP8-LM's mu agreement, and for float formats below fp32 the sum
  // over ranks of the statistics of re-encoded sums (one small all-gather).
  void finishStep() {
    const py::gil_scoped_release released;
    scaling_->finishStep(*transport_);
  }
  int lastShift(int param) const { return scaling_->lastShift(param); }
  py::dict statistics(int param) const {
    const auto c = scaling_->statistics(param);
    py::dict out;
    out["values"] = c.total;
    out["nonzero"] = c.nonzero;
    out["flushed"] = c.flushed;
    out["saturated"] = c.saturated;
    return out;
  }

 private:
  std::shared_ptr<PyTransport> transport_;
  int maxParameters_;
  std::vector<std::unique_ptr<comm::AllReduceAlgorithm>> algorithms_;
  std::unique_ptr<comm::BucketScaling> scaling_;
  comm::ReducerOptions options_;
};

}  // namespace
}  // namespace aps::python

PYBIND11_MODULE(_aps, m) {
  using namespace aps;
  using namespace aps::python;
  m.doc() = "aps: low-precision formats, codecs and gradient all-reduce (C++ core)";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = APS_VERSION;  // the CMake project's version (framework/core/Version.h)

  py::class_<FloatFormat>(m, "Format", "A float format: a preset name or a dict of format keys")
      .def(py::init([](const py::object& spec) { return toFormat(spec); }), py::arg("spec"))
      .def_readonly("name", &FloatFormat::name)
      .def_readonly("exponent_bits", &FloatFormat::exponentBits)
      .def_readonly("mantissa_bits", &FloatFormat::mantissaBits)
      .def_readonly("bias", &FloatFormat::bias)
      .def_readonly("subnormals", &FloatFormat::subnormals)
      .def_property_readonly("specials", [](const FloatFormat& f) { return precision::specialsName(f.specials); })
      .def_property_readonly("overflow", [](const FloatFormat& f) { return precision::overflowName(f.overflow); })
      .def_property_readonly("bits", &FloatFormat::bits)
      .def_property_readonly("max_value", &FloatFormat::maxValue)
      .def_property_readonly("min_normal", &FloatFormat::minNormal)
      .def_property_readonly("min_subnormal", &FloatFormat::minSubnormal)
      .def_property_readonly("epsilon", &FloatFormat::epsilon)
      .def_property_readonly("finite_count", &FloatFormat::finiteCount)
      .def_property_readonly("has_inf", &FloatFormat::hasInf)
      .def_property_readonly("has_nan", &FloatFormat::hasNan)
      .def("decode", &FloatFormat::decode, py::arg("code"), "The value of one code")
      .def("values", &formatValues, "Every code's value (index = code), formats of up to 16 bits")
      .def("describe", &FloatFormat::describe)
      .def("__repr__", [](const FloatFormat& f) { return "aps.Format(" + f.describe() + ")"; })
      .def("__eq__", [](const FloatFormat& a, const FloatFormat& b) { return a == b; });

  m.def("quantize", &quantize, py::arg("x"), py::arg("format"), py::arg("rounding") = "nearest", py::arg("seed") = 0,
        py::arg("stream") = 0,
        "x rounded to the format (float32, same shape). Stochastic rounding gives element i (flat "
        "index) the draw randomBits32(seed, stream, i), as aps_formats quantize --seed does with stream 0.");
  m.def("block_quantize", &blockQuantize, py::arg("x"), py::arg("format"), py::arg("block_size") = 32,
        py::arg("rounding") = "nearest", py::arg("seed") = 0, py::arg("stream") = 0,
        "x (flat order) with one power-of-two scale per block: 2^(floor(log2(amax)) - emax), elements rounded to "
        "the format and saturated (OCP MX with block 32 and an MX element type); block_size 0: one scale");
  m.def("encode", &encode, py::arg("x"), py::arg("codec"), py::arg("seed") = 0, py::arg("stream") = 0,
        "The wire bytes of x under a codec spec ('e4m3', 'e5m2:stochastic', 'dettmers_dynamic/block256', ...)");
  m.def("decode", &decode, py::arg("data"), py::arg("codec"), py::arg("n"),
        "n float32 values back from wire bytes (any contiguous buffer of bytes: bytes, bytearray, memoryview, a uint8 "
        "NumPy array)");
  m.def(
      "encoded_bytes", [](const std::string& codec, int64_t n) { return precision::makeCodec(codec)->encodedBytes(n); },
      py::arg("codec"), py::arg("n"));
  m.def("aps_shifts", &apsShifts, py::arg("layers"), py::arg("format"), py::arg("world_size") = 1,
        py::arg("mode") = "aps",
        "APS power-of-two shift per layer (multiply by 2**shift before quantizing) for one process's layers");
  m.def(
      "scale_by_power_of_two",
      [](const FloatArray& x, int shift) {
        FloatArray out = likeShape(x);
        precision::scaleByPowerOfTwo(x.data(), out.mutable_data(), x.size(), shift);
        return out;
      },
      py::arg("x"), py::arg("shift"));
  m.def("glob_match", &precision::HybridPolicy::globMatch, py::arg("pattern"), py::arg("name"),
        "Whether a parameter name matches a hybrid precision rule's pattern, as aps_train matches them");
  m.def("rounding_modes", [] {
    std::vector<std::string> names;
    for (auto n : precision::kRoundingModeNames.names) names.emplace_back(n);
    return names;
  });

  py::class_<PyTransport, std::shared_ptr<PyTransport>>(m, "Transport",
                                                        "A world of ranks whose exchange rounds Python delivers")
      .def(py::init<int, int, py::object>(), py::arg("rank"), py::arg("world_size"), py::arg("exchange"))
      .def_property_readonly("world_size", &PyTransport::worldSize)
      .def_property_readonly("rank", &PyTransport::firstLocalRank);

  py::class_<BucketReducer>(m, "BucketReducer", "aps's reduction of one flat gradient bucket over a Transport")
      .def(py::init<std::shared_ptr<PyTransport>, const std::vector<std::string>&, const std::string&,
                    const std::string&, bool, uint64_t, int, int64_t>(),
           py::arg("transport"), py::arg("codecs"), py::arg("scaling"), py::arg("algorithm"), py::arg("error_feedback"),
           py::arg("seed"), py::arg("max_parameters"), py::arg("block_size") = 32)
      .def("reduce", &BucketReducer::reduce, py::arg("flat"), py::arg("params"), py::arg("offsets"), py::arg("bucket"),
           py::arg("step"), py::arg("formats") = std::vector<int>{})
      .def("finish_step", &BucketReducer::finishStep)
      .def("last_shift", &BucketReducer::lastShift, py::arg("param"))
      .def("statistics", &BucketReducer::statistics, py::arg("param"));
}
