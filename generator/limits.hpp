// Bounds on what a config may hold. They keep every recursive walk (JSON parsing, validation,
// source rendering, NVRTC's parser) far from the stack's end and every input small, whoever
// built the config: JSON files and C++ callers get the same ConfigErrors. docs/CONFIG.md lists them.
#pragma once
#include <cstddef>

namespace jit::detail {

inline constexpr int kMaxMaskDepth = 16;  // levels of mask.masks (the top mask is level 1)
inline constexpr int kMaxMasks = 64;      // masks in one tree, combinators included
inline constexpr std::size_t kMaxSnippetBytes = 64 * 1024;
inline constexpr int kMaxSnippetNesting = 256;               // ( [ { open at once inside one snippet
inline constexpr std::size_t kMaxConfigBytes = 1024 * 1024;  // a config file or JSON text
inline constexpr int kMaxJsonDepth = 64;                     // arrays / objects open at once in config JSON

}  // namespace jit::detail
