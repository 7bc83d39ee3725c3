// The CUDA templates, embedded at build time by cmake/embed_templates.cmake.
#pragma once
#include <string_view>
#include <vector>

namespace jit::detail {

struct EmbeddedFile {
  std::string_view path;  // relative to templates/, e.g. "common/mask.cuh"
  std::string_view bytes;
};

// Sorted by path; the bytes are hashed into every cache key.
const std::vector<EmbeddedFile>& embedded_templates();

}  // namespace jit::detail
