#include "runtime/safetensors.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/errors.hpp"

namespace jit::safetensors {

std::size_t element_size(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16") return 2;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  throw Error(fmt::format("safetensors: unsupported dtype '{}'", dtype));
}

std::map<std::string, TensorData> read(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open", path.string()));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  auto bad = [&](const std::string& why) { return Error(fmt::format("{}: not a valid safetensors file: {}", path.string(), why)); };
  if (data.size() < 8) throw bad("shorter than its 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[i]);
  if (n > data.size() - 8) throw bad(fmt::format("header length {} exceeds the file", n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data.substr(8, n));
  } catch (const std::exception& e) {
    throw bad(e.what());
  }
  const std::size_t base = 8 + n;
  std::map<std::string, TensorData> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      TensorData td;
      td.dtype = t.at("dtype").get<std::string>();
      td.shape = t.at("shape").get<std::vector<std::int64_t>>();
      const auto off = t.at("data_offsets").get<std::vector<std::uint64_t>>();
      std::uint64_t count = 1;
      for (auto s : td.shape) count *= static_cast<std::uint64_t>(s);
      if (off.size() != 2 || off[0] > off[1] || base + off[1] > data.size() ||
          off[1] - off[0] != count * element_size(td.dtype))
        throw bad(fmt::format("tensor '{}' has inconsistent data_offsets", name));
      td.bytes = data.substr(base + off[0], off[1] - off[0]);
      out.emplace(name, std::move(td));
    } catch (const nlohmann::json::exception& e) {
      throw bad(fmt::format("tensor '{}': {}", name, e.what()));
    }
  }
  return out;
}

void write(const std::filesystem::path& path, const std::map<std::string, TensorData>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(fmt::format("{}: cannot write", path.string()));
  std::uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << h;
  for (const auto& [name, t] : tensors) f.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  if (!f) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace jit::safetensors
