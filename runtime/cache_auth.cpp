// The runtime's check of a cache entry before it is used (cache::Options::validate): an entry is
// served under a key only if its own recorded inputs hash to that key, and its cubin's ELF symbol
// table defines the kernel derived from that key (fa4_fwd_<key[0:16]>, or fa4_combine_<key[0:16]>
// for a combine kernel's entry, whose meta.json records "combine" instead of "config"). Copying
// entry B under key A, even with meta.json edited to match or A's name appended to B's bytes, then
// fails here (and at load: cuModuleGetFunction finds no fa4_fwd_<A>) unless the cubin's symbols
// themselves are patched, which only the MAC of a deployment secret stops (docs/CACHE.md).
#include <elf.h>

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/errors.hpp"
#include "generator/combine.hpp"
#include "generator/key.hpp"
#include "generator/source.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::detail {

namespace {

std::string text(const nlohmann::json& meta, const char* field) {
  auto it = meta.find(field);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

// Symbol tables, not a byte search: `\0fa4_fwd_<A>\0` appended to B's cubin used to pass.
bool elf_defines_function(std::string_view elf, std::string_view name) {
  auto in_file = [&](std::uint64_t offset, std::uint64_t size) {
    return offset <= elf.size() && size <= elf.size() - offset;
  };
  Elf64_Ehdr eh;
  if (!in_file(0, sizeof eh)) return false;
  std::memcpy(&eh, elf.data(), sizeof eh);  // memcpy: the bytes need not be aligned
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_file(eh.e_shoff, std::uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr)))
    return false;
  auto section = [&](std::size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    return sh;
  };
  for (std::size_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr symtab = section(i);
    if (symtab.sh_type != SHT_SYMTAB || symtab.sh_entsize != sizeof(Elf64_Sym) || symtab.sh_link >= eh.e_shnum ||
        !in_file(symtab.sh_offset, symtab.sh_size))
      continue;
    const Elf64_Shdr strtab = section(symtab.sh_link);
    if (strtab.sh_type != SHT_STRTAB || !in_file(strtab.sh_offset, strtab.sh_size)) continue;
    const std::string_view strings = elf.substr(strtab.sh_offset, strtab.sh_size);
    for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + symtab.sh_offset + at, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_name >= strings.size())
        continue;
      const std::string_view rest = strings.substr(sym.st_name);
      const std::size_t end = rest.find('\0');
      if (end != std::string_view::npos && rest.substr(0, end) == name) return true;
    }
  }
  return false;
}

namespace {

// The checks both kernel families share, once the entry's inputs are rendered again.
cache::Verdict check_inputs(std::string_view key, const nlohmann::json& meta, std::string_view cubin,
                            const std::string& template_digest, const std::string& recomputed_key,
                            const std::string& entry) {
  if (text(meta, "template_digest") != template_digest)
    return {fmt::format("made with other templates ({})", text(meta, "template_digest")), /*foreign=*/true};
  if (recomputed_key != key) return {fmt::format("its recorded inputs hash to {}, not to its key", recomputed_key)};
  if (!elf_defines_function(cubin, entry))
    return {fmt::format("kernel.cubin does not define {} (the cubin of another key?)", entry)};
  return {};
}

}  // namespace

cache::Verdict check_cache_entry(std::string_view key, const nlohmann::json& meta, std::string_view cubin) {
  const auto [major, minor] = nvrtc_version();
  const std::string generator = text(meta, "generator"), nvrtc = text(meta, "nvrtc");
  const auto schema = meta.find("schema");
  if (generator.empty() || nvrtc.empty() || schema == meta.end() ||
      !(meta.contains("config") || meta.contains("combine")))
    return {"meta.json does not record the key inputs (generator, schema, NVRTC, config or combine)"};
  // Another build's entry: its key was computed from inputs this build cannot reproduce.
  if (generator != kGeneratorVersion || *schema != kCacheSchema || nvrtc != fmt::format("{}.{}", major, minor))
    return {fmt::format("made by another fa4jit build (generator {}, schema {}, NVRTC {})", generator, schema->dump(),
                        nvrtc),
            /*foreign=*/true};
  if (meta.contains("combine")) {
    CombineInputs in;
    try {
      in = combine_inputs(combine_spec_from_json(meta.at("combine")), nvrtc);
    } catch (const std::exception& e) {
      return {fmt::format("meta.json combine is not a valid combine kernel here: {}", e.what())};
    }
    return check_inputs(key, meta, cubin, in.template_digest, in.key, combine_entry_name(key));
  }
  CompileInputs in;
  try {
    // Entries made with tuning overrides record them ("tune"); older ones had none.
    in = compile_inputs(config_from_json(meta.at("config")),
                        ResolveOptions{parse_tune(text(meta, "tune"), "meta.json tune")});
  } catch (const std::exception& e) {
    return {fmt::format("meta.json config is not a valid config here: {}", e.what())};
  }
  return check_inputs(key, meta, cubin, in.template_digest, in.key, entry_name(key));
}

}  // namespace jit::detail
