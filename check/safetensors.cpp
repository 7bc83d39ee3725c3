#include "check/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fa4jit/errors.hpp"
#include "generator/bounded_json.hpp"

namespace jit::safetensors {

std::size_t element_size(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16") return 2;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  throw Error(fmt::format("safetensors: unsupported dtype '{}'", dtype));
}

namespace {

// The format's own limit (safetensors rejects larger headers), and its nesting: the header
// object, a tensor object, its shape / offsets arrays.
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;
constexpr int kMaxHeaderDepth = 3;

std::string shown_name(const std::string& s) {
  return nlohmann::json(s.size() <= 64 ? s : s.substr(0, 64) + "...")
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Span {
  std::uint64_t begin, end;
  std::string name;
};

// The data bytes are the tensors' and nothing else (the format's rule: no overlaps, no holes, no
// trailing bytes): bytes no tensor claims are where a second payload would hide.
template <class Bad>
void check_coverage(std::vector<Span>& spans, std::uint64_t data_bytes, const Bad& bad) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (i > 0 && spans[i].begin < spans[i - 1].end)
      throw bad(fmt::format("tensors {} [{}, {}] and {} [{}, {}] overlap", spans[i - 1].name, spans[i - 1].begin,
                            spans[i - 1].end, spans[i].name, spans[i].begin, spans[i].end));
    if (spans[i].begin > covered)
      throw bad(fmt::format("data bytes [{}, {}) belong to no tensor", covered, spans[i].begin));
    covered = spans[i].end;
  }
  if (covered < data_bytes)
    throw bad(fmt::format("{} trailing bytes after the tensors' data (which ends at byte {} of {})",
                          data_bytes - covered, covered, data_bytes));
}

// A read-only mapping of a whole regular file, unmapped on every exit path.
struct Mapping {
  const char* data = nullptr;
  std::size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data) ::munmap(const_cast<char*>(data), size);
  }
};

struct FileFd {
  int fd;
  ~FileFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::map<std::string, TensorData> parse(std::string_view data, const std::string& name) {
  using json = nlohmann::json;
  auto bad = [&](const std::string& why) {
    return Error(fmt::format("{}: not a valid safetensors file: {}", name, why));
  };
  if (data.size() < 8) throw bad("shorter than its 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[i]);
  if (n > data.size() - 8) throw bad(fmt::format("header length {} exceeds the file", n));
  if (n > kMaxHeaderBytes) throw bad(fmt::format("header length {} exceeds the format's {} bytes", n, kMaxHeaderBytes));
  json header;
  try {
    header = detail::parse_bounded_json(data.substr(8, n), kMaxHeaderBytes, kMaxHeaderDepth);
  } catch (const std::exception& e) {
    throw bad(fmt::format("header: {}", e.what()));
  }
  if (!header.is_object()) throw bad(fmt::format("the header is {}, not a JSON object", header.type_name()));
  const std::string_view body = data.substr(8 + n);  // offsets count from here
  std::vector<Span> spans;
  std::map<std::string, TensorData> out;
  for (const auto& [key, t] : header.items()) {
    const std::string tname = shown_name(key);
    if (key == "__metadata__") {
      if (!t.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, v] : t.items())
        if (!v.is_string()) throw bad(fmt::format("__metadata__ {} is not a string", shown_name(k)));
      continue;
    }
    auto tbad = [&](const std::string& why) { return bad(fmt::format("tensor {}: {}", tname, why)); };
    if (!t.is_object()) throw tbad("not an object");
    for (const auto& [k, v] : t.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw tbad(fmt::format("unknown field {}", shown_name(k)));
    if (!t.contains("dtype") || !t.at("dtype").is_string()) throw tbad("dtype is missing or not a string");
    if (!t.contains("shape") || !t.at("shape").is_array()) throw tbad("shape is missing or not an array");
    if (!t.contains("data_offsets") || !t.at("data_offsets").is_array() || t.at("data_offsets").size() != 2)
      throw tbad("data_offsets is missing or not [begin, end]");
    TensorData td;
    td.dtype = t.at("dtype").get<std::string>();
    std::uint64_t bytes = 0;
    try {
      bytes = element_size(td.dtype);
    } catch (const Error&) {
      throw tbad(fmt::format("unsupported dtype {}", shown_name(td.dtype)));
    }
    const json& shape = t.at("shape");
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const json& d = shape[i];
      // nlohmann parses non-negative integers as unsigned: negative, fractional, boolean dims fail here.
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw tbad(fmt::format("shape[{}] is {}; dims are non-negative integers", i, d.dump()));
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (__builtin_mul_overflow(bytes, dim, &bytes)) throw tbad("the shape's byte size overflows 64 bits");
      td.shape.push_back(static_cast<std::int64_t>(dim));
    }
    std::uint64_t off[2];
    for (int i = 0; i < 2; ++i) {
      const json& o = t.at("data_offsets")[static_cast<std::size_t>(i)];
      if (!o.is_number_unsigned())
        throw tbad(fmt::format("data_offsets[{}] is {}; offsets are non-negative integers", i, o.dump()));
      off[i] = o.get<std::uint64_t>();
    }
    if (off[0] > off[1] || off[1] > body.size())
      throw tbad(fmt::format("data_offsets [{}, {}] are not inside the {} data bytes", off[0], off[1], body.size()));
    if (off[1] - off[0] != bytes)
      throw tbad(fmt::format("data_offsets [{}, {}] hold {} bytes; {} of shape [{}] take {}", off[0], off[1],
                             off[1] - off[0], td.dtype, fmt::join(td.shape, ", "), bytes));
    if (bytes) spans.push_back({off[0], off[1], tname});
    td.bytes = std::string(body.substr(off[0], bytes));
    out.emplace(key, std::move(td));
  }
  check_coverage(spans, body.size(), bad);
  return out;
}

std::map<std::string, TensorData> read(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read at all, so
  // /dev/zero, a pipe or a directory is refused before a byte is read (it used to grow without bound).
  FileFd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) throw Error(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error(fmt::format("{}: cannot stat: {}", name, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{}: not a regular file (a {}); safetensors inputs are files", name,
                            S_ISFIFO(st.st_mode)   ? "FIFO"
                            : S_ISDIR(st.st_mode)  ? "directory"
                            : S_ISCHR(st.st_mode)  ? "character device"
                            : S_ISBLK(st.st_mode)  ? "block device"
                            : S_ISSOCK(st.st_mode) ? "socket"
                                                   : "special file"));
  // Mapped, not copied: parse() reads the header and copies each tensor's bytes once, and the
  // sizes it checks are the file's own (header length and offsets against st_size).
  Mapping m;
  m.size = static_cast<std::size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED) throw Error(fmt::format("{}: cannot map: {}", name, std::strerror(errno)));
    m.data = static_cast<const char*>(p);
  }
  return parse(std::string_view(m.data ? m.data : "", m.size), name);
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
  f.close();  // the last buffered bytes are written here: a full disk or a file size limit shows now
  if (!f) throw Error(fmt::format("{}: write failed: {}", path.string(), std::strerror(errno)));
}

}  // namespace jit::safetensors
