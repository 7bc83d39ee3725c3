// Authentication of what is loaded: the deployment secret's HMAC (a forger without it can neither
// move a signed entry under another key nor add an unsigned one) and the caller's validator (the
// runtime's recomputes the key: runtime_auth_test.cpp), with two cache roots as a shared tier in
// front of a user's own.
#include <gtest/gtest.h>

#include "cache/internal.hpp"
#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;
using jit::cache::Verdict;

namespace {

const std::string kSecret = "correct horse battery staple 42";

Options opts(std::vector<fs::path> roots, const std::string& secret = {}) {
  Options o;
  o.roots = std::move(roots);
  o.secret = secret;
  return o;
}

// What a writer of the shared tier can do without the secret: copy entry `from` under key `to`
// and edit meta.json so that everything it can check (key, size, digest) matches.
void copy_under(const fs::path& root, const std::string& from, const std::string& to) {
  fs::create_directories(entry_dir(root, to).parent_path());
  fs::copy(entry_dir(root, from), entry_dir(root, to), fs::copy_options::recursive);
  auto meta = nlohmann::json::parse(read_all(entry_dir(root, to) / "meta.json"));
  meta["key"] = to;
  write_all(entry_dir(root, to) / "meta.json", meta.dump(2));
}

Artifact make(const std::string& k) { return Artifact{cubin_for(k), {{"config", k}}, ""}; }

}  // namespace

TEST(CacheAuth, Sha256AndHmacKnownAnswers) {
  namespace d = jit::cache::detail;
  // FIPS 180-2 "abc", RFC 4231 test case 2.
  EXPECT_EQ(d::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(d::hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_TRUE(d::equal_constant_time("abc", "abc"));
  EXPECT_FALSE(d::equal_constant_time("abc", "abd"));
  EXPECT_FALSE(d::equal_constant_time("abc", "ab"));
}

TEST(CacheAuth, SecretRejectsCopiedAndUnsignedEntriesInASharedTier) {
  TempDir shared, user;
  std::string ka = key_of(1000), kb = key_of(1001), kc = key_of(1002);
  {
    Store w(opts({shared.path}, kSecret));  // a deployment member with the secret
    w.publish(kb, cubin_for(kb), {{"config", "b"}});
  }
  auto signed_meta = nlohmann::json::parse(read_all(entry_dir(shared.path, kb) / "meta.json"));
  ASSERT_TRUE(signed_meta.contains("mac"));
  copy_under(shared.path, kb, ka);  // B's signed entry, relabelled as A
  {
    Store attacker(opts({shared.path}));  // writes a self-consistent entry, unsigned
    attacker.publish(kc, cubin_for(kc), {{"config", "c"}});
  }

  EnvVar ro("FA4JIT_CACHE_FAULT", "readonly:" + shared.path.string());
  testing::internal::CaptureStderr();
  Store s(opts({shared.path, user.path}, kSecret));
  EXPECT_FALSE(s.load(ka));
  EXPECT_FALSE(s.load(kc));
  auto b = s.load(kb);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->origin, shared.path.string());
  int calls = 0;
  EXPECT_EQ(s.get_or_compile(
                 ka, [&] { return ++calls, make(ka); }, "a")
                .cubin,
            cubin_for(ka));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.load(ka)->origin, user.path.string());
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("MAC does not match"), std::string::npos) << err;
  EXPECT_NE(err.find("no MAC"), std::string::npos) << err;

  // verify sees both forgeries (and leaves the read-only tier alone).
  auto rep = s.verify();
  std::string all;
  for (auto& p : rep.problems) all += p + "\n";
  EXPECT_EQ(rep.problems.size(), 2u) << all;
  EXPECT_NE(all.find(ka + ": MAC does not match"), std::string::npos) << all;
  EXPECT_NE(all.find(kc + ": no MAC"), std::string::npos) << all;
  EXPECT_EQ(rep.removed, 0u);

  // The same forgery in a writable tier is evicted and rebuilt.
  copy_under(user.path, ka, key_of(1003));
  Store w(opts({user.path}, kSecret));
  auto rep2 = w.verify();
  EXPECT_EQ(rep2.removed, 1u);
  EXPECT_FALSE(fs::exists(entry_dir(user.path, key_of(1003))));
}

TEST(CacheAuth, ImportWithASecretAcceptsOnlySignedEntries) {
  TempDir signed_src, plain_src, dst;
  std::string k1 = key_of(1010), k2 = key_of(1011);
  {
    Store s(opts({signed_src.path}, kSecret));
    s.publish(k1, cubin_for(k1), {});
    s.export_archive(signed_src.path / "signed.fa4");
    Store p(opts({plain_src.path}));
    p.publish(k2, cubin_for(k2), {});
    p.export_archive(plain_src.path / "plain.fa4");
  }
  Store d(opts({dst.path}, kSecret));
  auto ok = d.import_archive(signed_src.path / "signed.fa4");
  EXPECT_EQ(ok.imported, 1u);
  auto bad = d.import_archive(plain_src.path / "plain.fa4");
  EXPECT_EQ(bad.imported, 0u);
  EXPECT_EQ(bad.rejected, 1u);
  ASSERT_FALSE(bad.problems.empty());
  EXPECT_NE(bad.problems[0].find("no MAC"), std::string::npos) << bad.problems[0];
  EXPECT_TRUE(d.load(k1));
  EXPECT_FALSE(d.load(k2));
}

TEST(CacheAuth, ValidatorDecidesWhatIsServedAndForeignEntriesSurviveVerify) {
  TempDir root;
  std::string good = key_of(1020), forged = key_of(1021), other_build = key_of(1022);
  {
    Store w(opts({root.path}));
    w.publish(good, cubin_for(good), {{"config", good}});
    w.publish(forged, cubin_for(forged), {{"config", "somebody else's"}});
    w.publish(other_build, cubin_for(other_build), {{"config", other_build}, {"build", "other"}});
  }
  std::atomic<int> calls{0};
  Options o = opts({root.path});
  o.validate = [&](std::string_view key, const nlohmann::json& meta, std::string_view cubin) -> Verdict {
    ++calls;
    if (cubin.size() != cubin_for(std::string(key)).size()) return {"wrong cubin"};
    if (meta.value("build", "") == "other") return {"made by another build", /*foreign=*/true};
    if (meta.value("config", "") != key) return {"recorded inputs are another key's"};
    return {};
  };
  Store s(o);
  auto rep = s.verify();
  EXPECT_EQ(rep.checked, 3u);
  EXPECT_EQ(rep.foreign, 1u);
  EXPECT_EQ(rep.removed, 1u);
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_NE(rep.problems[0].find("recorded inputs are another key's"), std::string::npos) << rep.problems[0];
  EXPECT_TRUE(fs::exists(entry_dir(root.path, other_build)));  // kept for the build that made it
  EXPECT_TRUE(s.load(good));
  EXPECT_FALSE(s.load(other_build));  // never served here, though
  EXPECT_GT(calls.load(), 0);

  // A freshly compiled kernel that fails its own check is kept in memory, not cached.
  Options strict = opts({root.path});
  strict.validate = [](std::string_view, const nlohmann::json&, std::string_view) { return Verdict{"always bad"}; };
  testing::internal::CaptureStderr();
  Store t(strict);
  std::string k = key_of(1023);
  EXPECT_EQ(t.get_or_compile(
                 k, [&] { return make(k); }, "cfg")
                .cubin,
            cubin_for(k));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("fails its own cache check"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(entry_dir(root.path, k)));
  EXPECT_EQ(t.load(k)->origin, "memory");
}
