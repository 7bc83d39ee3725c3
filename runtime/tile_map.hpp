// The tile-map kernel of a mask (jit::build_tile_map, runtime/tile_map.cpp): its source and compile,
// exposed for the tests (NVRTC compiles without a GPU).
#pragma once
#include <string>
#include <vector>

#include "fa4jit/advanced.hpp"
#include "fa4jit/kernel.hpp"

namespace jit::detail {

constexpr unsigned kTileMapThreads = 256;  // threads per CTA of the tile-map kernel

// The generated source: the config's mask tree (as the attention kernel renders it) and the
// classifier, entry fa4_tile_map.
std::string tile_map_source(const ResolvedConfig& rc);
std::vector<std::string> tile_map_options(const ResolvedConfig& rc);
// NVRTC: the cubin (CompileError at the snippet's line when a snippet does not compile).
std::string compile_tile_map(const ResolvedConfig& rc);

}  // namespace jit::detail
