// safetensors files (the format PyTorch users already have): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace jit::safetensors {

struct TensorData {
  std::string dtype;                // "BF16", "F16", "F32", ...
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// Throws jit::Error naming the file and what is wrong (truncated, bad header, offsets).
std::map<std::string, TensorData> read(const std::filesystem::path& path);
void write(const std::filesystem::path& path, const std::map<std::string, TensorData>& tensors);

std::size_t element_size(const std::string& dtype);

}  // namespace jit::safetensors
