// The runtime's authentication of cache entries (runtime/cache_auth.cpp) against forgeries in a
// shared tier in front of a user's own: entry B copied under key A (meta.json edited to match)
// is never served, `cache verify` reports it, kernels carry key-derived names (a swapped cubin
// does not load on a GPU), and what only the deployment secret stops (a cubin with its names
// patched) is shown too. NVRTC runs on the CPU; the GPU test skips without a GPU.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "generator/key.hpp"
#include "generator/presets.hpp"
#include "generator/source.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Options;
using jit::cache::Store;
using jit::detail::CompileInputs;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef";

CompileInputs inputs(int preset_index, const std::string& arch = "sm_90a") {
  jit::FA4Config c = jit::preset("default").at(static_cast<std::size_t>(preset_index));
  c.arch = arch;
  return jit::detail::compile_inputs(c);
}

// A minimal ELF64 file laid out as a cubin's sections are: a string table, a symbol table
// defining each of `functions` (global STT_FUNC in section 3), a .text section holding `payload`,
// then the section headers.
std::string make_elf(const std::vector<std::string>& functions, const std::string& payload) {
  constexpr char kSectionNames[] = "\0.strtab\0.symtab\0.text\0";  // at 1, 9 and 17
  std::string strtab(kSectionNames, sizeof kSectionNames - 1);
  std::vector<Elf64_Sym> syms(1);  // symbol 0 is the null symbol
  for (const std::string& f : functions) {
    Elf64_Sym s{};
    s.st_name = static_cast<Elf64_Word>(strtab.size());
    s.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    s.st_shndx = 3;
    syms.push_back(s);
    strtab += f + '\0';
  }
  const std::size_t str_off = sizeof(Elf64_Ehdr), sym_off = str_off + strtab.size(),
                    text_off = sym_off + syms.size() * sizeof(Elf64_Sym), sh_off = text_off + payload.size();
  Elf64_Shdr sh[4] = {};
  sh[1] = {1, SHT_STRTAB, 0, 0, str_off, strtab.size(), 0, 0, 1, 0};
  sh[2] = {9, SHT_SYMTAB, 0, 0, sym_off, syms.size() * sizeof(Elf64_Sym), 1, 1, 8, sizeof(Elf64_Sym)};
  sh[3] = {17, SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 0, text_off, payload.size(), 0, 0, 128, 0};
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = 190;  // EM_CUDA
  eh.e_version = EV_CURRENT;
  eh.e_shoff = sh_off;
  eh.e_ehsize = sizeof eh;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 4;
  eh.e_shstrndx = 1;
  std::string out(reinterpret_cast<const char*>(&eh), sizeof eh);
  out += strtab;
  out.append(reinterpret_cast<const char*>(syms.data()), syms.size() * sizeof(Elf64_Sym));
  out += payload;
  out.append(reinterpret_cast<const char*>(sh), sizeof sh);
  return out;
}

// Stands in for a cubin: an ELF file defining the key-derived kernel name, as NVRTC writes it.
std::string fake_cubin(const std::string& key) {
  return make_elf({jit::detail::entry_name(key)}, cubin_for(key, 4096));
}

// A combine kernel's cubin stand-in (generator/combine.hpp): it defines fa4_combine_<key[0:16]>.
std::string fake_combine_cubin(const std::string& key) {
  return make_elf({jit::detail::combine_entry_name(key)}, cubin_for(key, 1024));
}

Options validated(std::vector<fs::path> roots, const std::string& secret = {}) {
  Options o;
  o.roots = std::move(roots);
  o.validate = jit::detail::check_cache_entry;
  o.secret = secret;
  return o;
}

// Writes an entry directly, as a writer of the shared tier could: any meta, any cubin, with the
// size and digest fields made consistent (that needs no secret).
void plant(const fs::path& root, const std::string& key, nlohmann::json meta, const std::string& cubin) {
  Store w(Options{{root}});
  w.publish(key, cubin, meta);
}

// The CLI's stdout (and stderr, with merge_stderr) and exit status.
std::string run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env, int* rc,
                    bool merge_stderr = false) {
  std::vector<std::string> argv = {FA4JIT_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  Proc p = spawn(argv, env, /*capture_stdout=*/true, merge_stderr);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p.out_fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  const int st = p.wait();
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

}  // namespace

TEST(CacheRuntimeAuth, CopiedAndRelabelledEntriesAreNeverServed) {
  const CompileInputs a = inputs(0), b = inputs(1), c = inputs(2), d = inputs(3);
  TempDir shared, user;
  plant(shared.path, b.key, jit::detail::describe(b), fake_cubin(b.key));  // a genuine entry
  // 1. B's entry copied under A, meta.json's key edited.
  auto meta_b = jit::detail::describe(b);
  meta_b["key"] = a.key;
  plant(shared.path, a.key, meta_b, fake_cubin(b.key));
  // 2. A's true inputs in meta.json, B's cubin.
  plant(shared.path, c.key, jit::detail::describe(c), fake_cubin(b.key));
  // 3. B's cubin with its kernel names patched to D's (same length): only the secret stops this.
  std::string patched = fake_cubin(b.key);
  const std::string from = jit::detail::entry_name(b.key), to = jit::detail::entry_name(d.key);
  for (std::size_t at = patched.find(from); at != std::string::npos; at = patched.find(from, at + 1))
    patched.replace(at, from.size(), to);
  plant(shared.path, d.key, jit::detail::describe(d), patched);

  EnvVar ro("FA4JIT_CACHE_FAULT", "readonly:" + shared.path.string());
  testing::internal::CaptureStderr();
  Store s(validated({shared.path, user.path}));
  EXPECT_TRUE(s.load(b.key));
  EXPECT_FALSE(s.load(a.key));
  EXPECT_FALSE(s.load(c.key));
  int calls = 0;
  auto compiled = s.get_or_compile(
      a.key,
      [&] {
        return ++calls, jit::cache::Artifact{fake_cubin(a.key), jit::detail::describe(a), ""};
      },
      "a");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(compiled.cubin, fake_cubin(a.key));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("its recorded inputs hash to " + b.key + ", not to its key"), std::string::npos) << err;
  EXPECT_NE(err.find("does not define " + jit::detail::entry_name(c.key)), std::string::npos) << err;

  auto rep = s.verify();
  std::string all;
  for (auto& p : rep.problems) all += p + "\n";
  EXPECT_NE(all.find(a.key + ": its recorded inputs hash to"), std::string::npos) << all;
  EXPECT_NE(all.find(c.key + ": kernel.cubin does not define"), std::string::npos) << all;
  EXPECT_EQ(rep.problems.size(), 2u) << all;  // the patched cubin passes: it takes the secret

  // With the deployment secret only signed entries count: the patched one is refused too.
  testing::internal::CaptureStderr();
  Store sealed(validated({shared.path, user.path}, kSecret));
  EXPECT_FALSE(sealed.load(d.key));
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no MAC"), std::string::npos) << err;
}

TEST(CacheRuntimeAuth, EntriesOfAnotherBuildAreForeignNotBad) {
  const CompileInputs a = inputs(0);
  auto meta = jit::detail::describe(a);
  meta["generator"] = "fa4jit-generator-0";
  auto v = jit::detail::check_cache_entry(a.key, meta, fake_cubin(a.key));
  EXPECT_TRUE(v.foreign) << v.problem;
  meta = jit::detail::describe(a);
  meta["template_digest"] = std::string(32, '0');
  v = jit::detail::check_cache_entry(a.key, meta, fake_cubin(a.key));
  EXPECT_TRUE(v.foreign) << v.problem;
  meta = jit::detail::describe(a);
  meta.erase("config");
  v = jit::detail::check_cache_entry(a.key, meta, fake_cubin(a.key));
  EXPECT_FALSE(v.foreign);
  EXPECT_FALSE(v.problem.empty());
  EXPECT_TRUE(jit::detail::check_cache_entry(a.key, jit::detail::describe(a), fake_cubin(a.key)).problem.empty());
}

TEST(CacheRuntimeAuth, CliVerifySeesTheForgeryAndClearOnReadOnlyFails) {
  if (!fs::exists(FA4JIT_CLI)) GTEST_SKIP() << FA4JIT_CLI << " is not here (a copied test binary)";
  const CompileInputs a = inputs(0), b = inputs(1);
  TempDir cache;
  plant(cache.path, b.key, jit::detail::describe(b), fake_cubin(b.key));
  auto meta_b = jit::detail::describe(b);
  meta_b["key"] = a.key;
  plant(cache.path, a.key, meta_b, fake_cubin(b.key));
  const std::map<std::string, std::string> env = {
      {"FA4JIT_CACHE_DIR", cache.path.string()}, {"FA4JIT_CACHE_PATH", ""}, {"FA4JIT_CACHE_FAULT", ""}};
  int rc = -1;
  std::string out = run_cli({"cache", "verify"}, env, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("bad: " + entry_dir(cache.path, a.key).string() + ": its recorded inputs hash to " + b.key),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("removed 1"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(entry_dir(cache.path, a.key)));
  EXPECT_TRUE(fs::exists(entry_dir(cache.path, b.key)));

  auto ro = env;
  ro["FA4JIT_CACHE_FAULT"] = "readonly";
  out = run_cli({"cache", "clear"}, ro, &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_EQ(out.find("removed 0"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(entry_dir(cache.path, b.key)));
}

TEST(CacheRuntimeAuth, RealKernelsExportKeyDerivedNamesAndOtherwiseTheSamePtx) {
  // NVRTC on the CPU (a few s per compile): the names come from the key, nothing else changes.
  const CompileInputs a = inputs(0, "sm_80"), b = inputs(1, "sm_80");
  const auto named = jit::detail::nvrtc_compile(a.source, jit::detail::kSourceName, *a.headers, a.compile_options());
  // The same source with the plain names, as c9e8894 named every kernel.
  auto plain_options = a.options;
  plain_options.push_back("-DFA4JIT_FWD_NAME=fa4_fwd");
  const auto plain = jit::detail::nvrtc_compile(a.source, jit::detail::kSourceName, *a.headers, plain_options);
  const std::string fwd = jit::detail::entry_name(a.key);
  EXPECT_EQ(fwd, "fa4_fwd_" + a.key.substr(0, 16));
  EXPECT_NE(named.ptx.find(".entry " + fwd + "("), std::string::npos);
  EXPECT_EQ(named.ptx.find(".entry fa4_fwd("), std::string::npos);
  EXPECT_EQ(named.ptx.find(".entry fa4_combine"), std::string::npos) << "the combine is a module of its own";
  // Names normalised: the kernel's, and the internal-linkage prefix NVRTC derives from the first
  // kernel's name (_INTERNAL_<n>_9_fa4jit_cu_fa4_fwd, or a hash of a longer name).
  auto normalize = [&](std::string ptx) {
    ptx = std::regex_replace(ptx, std::regex(fwd), "fa4_fwd");
    return std::regex_replace(ptx, std::regex("_ZN[0-9]+_INTERNAL_00000000_9_fa4jit_cu_(fa4_fwd|[0-9a-f]{8})"),
                              "_ZN_INTERNAL_");
  };
  EXPECT_TRUE(normalize(named.ptx) == normalize(plain.ptx)) << "the PTX differs in more than symbol names";
  EXPECT_EQ(jit::detail::parse_ptxas_log(named.log).registers, jit::detail::parse_ptxas_log(plain.log).registers);
  EXPECT_GT(jit::detail::parse_ptxas_log(named.log).registers, 0);
  // Without the -D options the macro names themselves become the kernel names: such a cubin
  // loads under no key.
  const auto bare = jit::detail::nvrtc_compile(a.source, jit::detail::kSourceName, *a.headers, a.options);
  EXPECT_NE(bare.ptx.find(".entry FA4JIT_FWD_NAME("), std::string::npos);
  EXPECT_FALSE(jit::detail::check_cache_entry(a.key, jit::detail::describe(a), bare.cubin).problem.empty());

  auto meta = jit::detail::describe(a);
  EXPECT_TRUE(jit::detail::check_cache_entry(a.key, meta, named.cubin).problem.empty());
  // The real cubin of A under B's inputs and key: refused for the names it lacks.
  auto v = jit::detail::check_cache_entry(b.key, jit::detail::describe(b), named.cubin);
  EXPECT_NE(v.problem.find("does not define " + jit::detail::entry_name(b.key)), std::string::npos) << v.problem;
}

// Combine kernels (generator/combine.hpp) are entries of their own, checked the same way: their
// recorded spec must hash to their key, and their cubin must export fa4_combine_<key[0:16]>.
TEST(CacheRuntimeAuth, CombineEntriesAreCheckedLikeKernels) {
  const CompileInputs a = inputs(0);
  const jit::detail::CombineInputs ci = jit::detail::combine_inputs(a.config);
  const int depth = a.config.config.depth;
  EXPECT_EQ(ci.spec, (jit::detail::CombineSpec{"sm_90a", *a.config.config.output_dtype, depth}));
  EXPECT_NE(ci.key, a.key);
  const nlohmann::json meta = jit::detail::describe(ci);
  EXPECT_EQ(jit::detail::check_cache_entry(ci.key, meta, fake_combine_cubin(ci.key)).problem, "");
  // Another spec's inputs recorded under this key: refused, not foreign.
  auto other = meta;
  other["combine"]["depth"] = depth == 64 ? 128 : 64;
  auto v = jit::detail::check_cache_entry(ci.key, other, fake_combine_cubin(ci.key));
  EXPECT_NE(v.problem.find("its recorded inputs hash to"), std::string::npos) << v.problem;
  EXPECT_FALSE(v.foreign);
  other["combine"]["depth"] = 100;
  v = jit::detail::check_cache_entry(ci.key, other, fake_combine_cubin(ci.key));
  EXPECT_NE(v.problem.find("combine.depth: 100"), std::string::npos) << v.problem;
  other = meta;
  other["combine"].erase("output_dtype");
  v = jit::detail::check_cache_entry(ci.key, other, fake_combine_cubin(ci.key));
  EXPECT_NE(v.problem.find("combine.output_dtype: missing"), std::string::npos) << v.problem;
  // A kernel's cubin under the combine's key and inputs, and the other way round.
  v = jit::detail::check_cache_entry(ci.key, meta, fake_cubin(ci.key));
  EXPECT_NE(v.problem.find("does not define " + jit::detail::combine_entry_name(ci.key)), std::string::npos)
      << v.problem;
  v = jit::detail::check_cache_entry(a.key, jit::detail::describe(a), fake_combine_cubin(a.key));
  EXPECT_NE(v.problem.find("does not define " + jit::detail::entry_name(a.key)), std::string::npos) << v.problem;
  // A combine's meta relabelled with a kernel's key.
  v = jit::detail::check_cache_entry(a.key, meta, fake_combine_cubin(a.key));
  EXPECT_NE(v.problem.find("its recorded inputs hash to " + ci.key), std::string::npos) << v.problem;

  // The real thing (NVRTC on the CPU, a fraction of a second): the entry it makes validates.
  const auto art = jit::detail::compile_artifact(ci);
  EXPECT_EQ(jit::detail::check_cache_entry(ci.key, art.meta, art.cubin).problem, "");
  EXPECT_GT(art.meta.at("resources").at("registers").get<int>(), 0);
  const auto out =
      jit::detail::nvrtc_compile(ci.source, jit::detail::kCombineSourceName, *ci.headers, ci.compile_options());
  EXPECT_NE(out.ptx.find(".entry " + jit::detail::combine_entry_name(ci.key) + "("), std::string::npos);
  EXPECT_EQ(out.ptx.find(".entry fa4_fwd"), std::string::npos);
}

TEST(CacheRuntimeAuth, GpuSwappedCubinFailsToLoad) {
  if (const std::string why = jit::detail::driver_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string arch = jit::detail::device_arch(jit::detail::ensure_context());
  const CompileInputs a = inputs(0, arch), b = inputs(1, arch);
  const auto art_a = jit::detail::compile_artifact(a);
  const auto art_b = jit::detail::compile_artifact(b);
  EXPECT_NO_THROW(jit::detail::LoadedModule(art_a.cubin, jit::detail::entry_name(a.key), a.config.smem_bytes));
  // B's cubin served under A: cuModuleGetFunction finds no fa4_fwd_<A>, so nothing runs.
  try {
    jit::detail::LoadedModule m(art_b.cubin, jit::detail::entry_name(a.key), a.config.smem_bytes);
    ADD_FAILURE() << "B's cubin loaded under A's key";
  } catch (const jit::DriverError& e) {
    EXPECT_NE(std::string(e.what()).find(jit::detail::entry_name(a.key)), std::string::npos) << e.what();
  }
}

// A kernel made with tuning overrides records them in meta.json ("tune"), so the validator
// resolves the entry as it was made: its inputs hash to its key. Without the record they would
// not (the overrides change the generated source), and the entry is refused.
TEST(CacheRuntimeAuth, EntriesMadeWithTuningOverridesValidate) {
  jit::FA4Config c = jit::preset("default").at(0);
  c.arch = "sm_90a";
  const CompileInputs in =
      jit::detail::compile_inputs(c, jit::ResolveOptions{jit::parse_tune("persistent=0,pingpong=0")});
  ASSERT_NE(in.key, inputs(0).key);
  const nlohmann::json meta = jit::detail::describe(in);
  EXPECT_EQ(meta.at("tune"), "pingpong=0,persistent=0");
  EXPECT_EQ(jit::detail::check_cache_entry(in.key, meta, fake_cubin(in.key)).problem, "");
  nlohmann::json bare = meta;
  bare.erase("tune");
  EXPECT_NE(jit::detail::check_cache_entry(in.key, bare, fake_cubin(in.key)).problem.find("hash to"),
            std::string::npos);
  nlohmann::json bad = meta;
  bad["tune"] = "pingpong";
  EXPECT_NE(jit::detail::check_cache_entry(in.key, bad, fake_cubin(in.key)).problem.find("meta.json tune: 'pingpong'"),
            std::string::npos);
}

// The entry-name check reads the cubin's ELF symbol table: B's cubin with A's name appended (the
// probe's forgery: A's meta.json, the digest rewritten) used to pass a byte search; now it is a
// miss, `cache verify` removes it, and malformed or truncated ELF files are refused in bounds.
TEST(CacheRuntimeAuth, EntryNamesComeFromTheElfSymbolTable) {
  using jit::detail::elf_defines_function;
  const CompileInputs a = inputs(0), b = inputs(1);
  const std::string name_a = jit::detail::entry_name(a.key);
  const std::string appended = fake_cubin(b.key) + '\0' + name_a + '\0';
  EXPECT_FALSE(elf_defines_function(appended, name_a));
  EXPECT_NE(jit::detail::check_cache_entry(a.key, jit::detail::describe(a), appended)
                .problem.find("does not define " + name_a),
            std::string::npos);
  EXPECT_TRUE(elf_defines_function(fake_cubin(a.key), name_a));
  EXPECT_FALSE(elf_defines_function(fake_cubin(a.key), name_a.substr(0, name_a.size() - 1)));  // whole names only

  // In a string table but named by no symbol; undefined; not a function.
  const std::string elf = make_elf({"other"}, name_a + '\0');
  EXPECT_FALSE(elf_defines_function(elf, name_a));
  auto with_symbol = [&](unsigned char info, Elf64_Section shndx) {
    std::string e = make_elf({name_a}, "");
    Elf64_Sym sym;
    const std::size_t at = sizeof(Elf64_Ehdr) + 23 + name_a.size() + 1 + sizeof(Elf64_Sym);  // symbol 1
    std::memcpy(&sym, e.data() + at, sizeof sym);
    sym.st_info = info;
    sym.st_shndx = shndx;
    std::memcpy(e.data() + at, &sym, sizeof sym);
    return e;
  };
  EXPECT_TRUE(elf_defines_function(with_symbol(ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), 3), name_a));
  EXPECT_FALSE(elf_defines_function(with_symbol(ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), SHN_UNDEF), name_a));
  EXPECT_FALSE(elf_defines_function(with_symbol(ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), 3), name_a));

  // Every prefix (the section headers come last) and every header field pointing out of bounds.
  const std::string good = fake_cubin(a.key);
  for (std::size_t n = 0; n < good.size(); n += 7) EXPECT_FALSE(elf_defines_function(good.substr(0, n), name_a)) << n;
  auto patched = [&](std::size_t offset, std::uint64_t value, std::size_t width) {
    std::string e = good;
    std::memcpy(e.data() + offset, &value, width);
    return elf_defines_function(e, name_a);
  };
  Elf64_Ehdr eh;
  std::memcpy(&eh, good.data(), sizeof eh);
  const std::size_t symtab_hdr = eh.e_shoff + 2 * sizeof(Elf64_Shdr), strtab_hdr = eh.e_shoff + sizeof(Elf64_Shdr);
  EXPECT_FALSE(patched(offsetof(Elf64_Ehdr, e_shoff), ~0ull - 8, 8));
  EXPECT_FALSE(patched(offsetof(Elf64_Ehdr, e_shnum), 0xffff, 2));
  EXPECT_FALSE(patched(offsetof(Elf64_Ehdr, e_shentsize), 32, 2));
  EXPECT_FALSE(patched(symtab_hdr + offsetof(Elf64_Shdr, sh_offset), ~0ull - 8, 8));
  EXPECT_FALSE(patched(symtab_hdr + offsetof(Elf64_Shdr, sh_size), ~0ull - 8, 8));
  EXPECT_FALSE(patched(symtab_hdr + offsetof(Elf64_Shdr, sh_link), 9, 4));
  EXPECT_FALSE(patched(strtab_hdr + offsetof(Elf64_Shdr, sh_size), 23 + 4, 8));  // the name cut short, no NUL
  EXPECT_FALSE(patched(strtab_hdr + offsetof(Elf64_Shdr, sh_offset), good.size(), 8));
  EXPECT_FALSE(patched(EI_CLASS, ELFCLASS32, 1));

  // Through the cache and the CLI: a miss and a rebuild, and `cache verify` names it.
  TempDir cache;
  plant(cache.path, a.key, jit::detail::describe(a), appended);
  {
    Store s(validated({cache.path}));
    testing::internal::CaptureStderr();
    EXPECT_FALSE(s.load(a.key));
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("does not define " + name_a), std::string::npos) << err;
  }
  if (!fs::exists(FA4JIT_CLI)) return;
  plant(cache.path, a.key, jit::detail::describe(a), appended);
  int rc = -1;
  const std::string out =
      run_cli({"cache", "verify"}, {{"FA4JIT_CACHE_DIR", cache.path.string()}, {"FA4JIT_CACHE_PATH", ""}}, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("bad: " + entry_dir(cache.path, a.key).string() + ": kernel.cubin does not define " + name_a),
            std::string::npos)
      << out;
}

// Issue 52 item 4: `cache import` exited 0 and said "imported 0 entries (0 already present, 0
// rejected)" for a truncated archive, a header claiming 2^63 bytes, a forged entry and unsigned
// entries under a secret. It now names every entry it dropped and fails.
TEST(CacheRuntimeAuth, CliImportSaysWhatItDroppedAndFails) {
  if (!fs::exists(FA4JIT_CLI)) GTEST_SKIP() << FA4JIT_CLI << " is not here (a copied test binary)";
  const CompileInputs a = inputs(0), b = inputs(1);
  TempDir src, work;
  plant(src.path, a.key, jit::detail::describe(a), fake_cubin(a.key));
  plant(src.path, b.key, jit::detail::describe(b), fake_cubin(b.key));
  const fs::path good = work.path / "good.far";
  ASSERT_EQ(Store(validated({src.path})).export_archive(good), 2u);
  const std::string bytes = read_all(good);

  auto import = [&](const fs::path& archive, std::map<std::string, std::string> env, int* rc) {
    const fs::path cache = work.path / ("cache-" + archive.filename().string());
    env["FA4JIT_CACHE_DIR"] = cache.string();
    env["FA4JIT_CACHE_PATH"] = "";
    return run_cli({"cache", "import", archive.string()}, env, rc, /*merge_stderr=*/true);
  };
  int rc = -1;
  std::string out = import(good, {}, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("imported 2 entries (0 already present, 0 rejected)"), std::string::npos) << out;
  EXPECT_EQ(out.find("dropped"), std::string::npos) << out;

  // Cut inside the second entry: the first is imported, the rest reported.
  const fs::path cut = work.path / "cut.far";
  write_all(cut, bytes.substr(0, bytes.size() - 100));
  out = import(cut, {}, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("imported 1 entries"), std::string::npos) << out;
  EXPECT_NE(out.find("dropped: entry 1: truncated; stopping"), std::string::npos) << out;
  EXPECT_NE(out.find("not everything was imported"), std::string::npos) << out;

  // A header claiming 2^63 bytes of cubin.
  const fs::path huge = work.path / "huge.far";
  std::string h = "FA4JITAR1\nE";  // docs/CACHE.md "Archives": magic, then 'E' | u64 meta_len | u64 cubin_len
  for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1} << 63})
    for (int i = 0; i < 8; ++i) h += static_cast<char>((n >> (8 * i)) & 0xff);
  write_all(huge, h);
  out = import(huge, {}, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("dropped: entry 0: its header claims 0 bytes of meta.json and 9223372036854775808 of cubin"),
            std::string::npos)
      << out;

  // A forged entry (B's cubin under A's inputs, digest consistent) and unsigned entries under a secret.
  TempDir forged_src;
  plant(forged_src.path, a.key, jit::detail::describe(a), fake_cubin(b.key));
  const fs::path forged = work.path / "forged.far";
  ASSERT_EQ(Store(Options{{forged_src.path}}).export_archive(forged), 1u);
  out = import(forged, {}, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("imported 0 entries (0 already present, 1 rejected)"), std::string::npos) << out;
  EXPECT_NE(out.find("dropped: entry 0 (" + a.key + "): kernel.cubin does not define"), std::string::npos) << out;
  const fs::path unsigned_copy = work.path / "unsigned.far";
  fs::copy_file(good, unsigned_copy);
  out = import(unsigned_copy, {{"FA4JIT_CACHE_SECRET", kSecret}}, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("2 rejected"), std::string::npos) << out;
  EXPECT_NE(out.find("no MAC"), std::string::npos) << out;
}
