// safetensors files (the format PyTorch users already have): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace jit::safetensors {

struct TensorData {
  std::string dtype;  // "BF16", "F16", "F8_E4M3", "F32", ...
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// Throws jit::Error naming the file and what is wrong (truncated, bad header, offsets).
std::map<std::string, TensorData> read(const std::filesystem::path& path);
// The same for a file's bytes; `name` stands for the file in errors. Every offset, dim and size
// is checked with overflow-checked arithmetic; tensors may not overlap; the header is strict JSON
// (dims and offsets are non-negative JSON integers, no unknown fields).
std::map<std::string, TensorData> parse(std::string_view data, const std::string& name);
void write(const std::filesystem::path& path, const std::map<std::string, TensorData>& tensors);

std::size_t element_size(const std::string& dtype);

}  // namespace jit::safetensors
