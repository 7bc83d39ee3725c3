// The safetensors reader (`fa4jit run --inputs`): regular files only, every offset, dim and size
// checked with overflow-checked arithmetic, tensors that cover the data exactly, a strict JSON
// header with unique names.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "check/safetensors.hpp"
#include "fa4jit/errors.hpp"

namespace fs = std::filesystem;

namespace {

class SafetensorsReader : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("fa4jit_st_" + std::to_string(std::random_device{}()) + ".safetensors");
  }
  void TearDown() override { fs::remove(path_); }

  // A file with this header text (padded to 8 bytes) followed by `data`.
  void write(std::string header, const std::string& data) const {
    header.append((8 - header.size() % 8) % 8, ' ');
    std::ofstream f(path_, std::ios::binary);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << header << data;
  }

  // Expects jit::Error naming the file and every one of `words`.
  void expect_refused(std::initializer_list<const char*> words) const {
    try {
      const auto t = jit::safetensors::read(path_);
      ADD_FAILURE() << "accepted, " << t.size() << " tensors";
    } catch (const jit::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
      for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
    }
  }

  fs::path path_;
};

TEST_F(SafetensorsReader, ValidFilesStillRead) {
  write(R"({"__metadata__": {"format": "pt"}, "q": {"dtype": "BF16", "shape": [1, 2, 2, 4], "data_offsets": [0, 32]},)"
        R"( "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [32, 32]}})",
        std::string(32, '\x7'));
  const auto t = jit::safetensors::read(path_);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("q").bytes, std::string(32, '\x7'));
  EXPECT_EQ(t.at("e").bytes, "");
}

TEST_F(SafetensorsReader, OffsetsThatWrapAroundAreRefused) {
  // base + end wrapped past 2^64: the tensor was read from the header bytes.
  const std::uint64_t begin = ~std::uint64_t{0} - 47;  // 2^64 - 48
  write(R"({"q": {"dtype": "BF16", "shape": [1, 1, 1, 24], "data_offsets": [)" + std::to_string(begin) + ", " +
            std::to_string(begin + 48) + "]}}",
        std::string(48, 'x'));
  expect_refused({"tensor \"q\"", "data_offsets"});
  write(R"({"q": {"dtype": "BF16", "shape": [1, 1, 1, 24], "data_offsets": [18446744073709551600, 32]}})",
        std::string(48, 'x'));
  expect_refused({"data_offsets"});
}

TEST_F(SafetensorsReader, OverlappingTensorsAreRefused) {
  write(R"({"q": {"dtype": "BF16", "shape": [1, 1, 1, 8], "data_offsets": [0, 16]},)"
        R"( "k": {"dtype": "BF16", "shape": [1, 1, 1, 8], "data_offsets": [8, 24]}})",
        std::string(24, 'x'));
  expect_refused({"\"q\"", "\"k\"", "overlap"});
}

TEST_F(SafetensorsReader, NegativeDimsAreRefused) {
  // (-1) * (-24) elements of 2 bytes "matched" 48 bytes through unsigned wrap-around.
  write(R"({"q": {"dtype": "BF16", "shape": [-1, -24], "data_offsets": [0, 48]}})", std::string(48, 'x'));
  expect_refused({"tensor \"q\"", "shape[0] is -1"});
}

TEST_F(SafetensorsReader, ShapeProductsThatOverflowAreRefused) {
  // 2^32 * 2^32 * 2 bytes wrapped to 0 and "matched" an empty tensor.
  write(R"({"q": {"dtype": "BF16", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", "");
  expect_refused({"tensor \"q\"", "overflows"});
  write(R"({"q": {"dtype": "BF16", "shape": [9223372036854775808], "data_offsets": [0, 0]}})", "");
  expect_refused({"shape[0]"});
}

TEST_F(SafetensorsReader, HeaderTypesAreStrict) {
  write(R"({"q": {"dtype": "BF16", "shape": [2.5, 2], "data_offsets": [0, 8]}})", std::string(8, 'x'));
  expect_refused({"shape[0] is 2.5"});
  write(R"({"q": {"dtype": "BF16", "shape": [true, 4], "data_offsets": [0, 8]}})", std::string(8, 'x'));
  expect_refused({"shape[0] is true"});
  write(R"({"q": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8.0]}})", std::string(8, 'x'));
  expect_refused({"data_offsets[1]"});
  write(R"({"q": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8], "extra": 1}})", std::string(8, 'x'));
  expect_refused({"unknown field \"extra\""});
  write(R"({"q": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8, 9]}})", std::string(8, 'x'));
  expect_refused({"data_offsets"});
  write(R"({"q": {"dtype": 7, "shape": [4], "data_offsets": [0, 8]}})", std::string(8, 'x'));
  expect_refused({"dtype"});
  write(R"({"q": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 8]}})", std::string(8, 'x'));
  expect_refused({"unsupported dtype \"Q4\""});
  write(R"({"__metadata__": {"a": 1}})", "");
  expect_refused({"__metadata__"});
  write(R"([1, 2])", "");
  expect_refused({"not a JSON object"});
  write(R"({"q": {"dtype": "BF16", "shape": [[[[4]]]], "data_offsets": [0, 8]}})", std::string(8, 'x'));
  expect_refused({"nested deeper"});
}

// FP8 inputs of `fa4jit run` (torch.float8_e4m3fn tensors saved by safetensors): one byte an
// element, the bytes kept as they are; a size that assumes two bytes is refused.
TEST_F(SafetensorsReader, Float8E4m3TensorsReadAsOneByteElements) {
  std::string data;
  for (int i = 0; i < 16; ++i) data += static_cast<char>(0x30 + i);
  write(R"({"q": {"dtype": "F8_E4M3", "shape": [1, 2, 2, 4], "data_offsets": [0, 16]},)"
        R"( "descale_q": {"dtype": "F32", "shape": [1, 2], "data_offsets": [16, 24]}})",
        data + std::string(8, '\0'));
  const auto t = jit::safetensors::read(path_);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.at("q").dtype, "F8_E4M3");
  EXPECT_EQ(t.at("q").shape, (std::vector<std::int64_t>{1, 2, 2, 4}));
  EXPECT_EQ(t.at("q").bytes, data);
  EXPECT_EQ(jit::safetensors::element_size("F8_E4M3"), 1u);
  EXPECT_EQ(jit::safetensors::element_size("F8_E5M2"), 1u);
  write(R"({"q": {"dtype": "F8_E4M3", "shape": [1, 2, 2, 4], "data_offsets": [0, 32]}})", std::string(32, 'x'));
  expect_refused({"tensor \"q\"", "hold 32 bytes", "F8_E4M3 of shape [1, 2, 2, 4] take 16"});

  // Written back as it was read.
  const fs::path copy = path_.string() + ".copy";
  jit::safetensors::write(copy, {{"k", {"F8_E4M3", {2, 8}, data}}});
  const auto back = jit::safetensors::read(copy);
  fs::remove(copy);
  EXPECT_EQ(back.at("k").dtype, "F8_E4M3");
  EXPECT_EQ(back.at("k").bytes, data);
}

TEST_F(SafetensorsReader, HugeHeaderLengthsAreRefused) {
  {
    std::ofstream f(path_, std::ios::binary);
    const std::uint64_t n = ~std::uint64_t{0};
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << "{}";
  }
  expect_refused({"header length"});
}

// Issue 52 item 3: /dev/zero was read until memory ran out, a FIFO blocked, and bytes after the
// tensors or a name given twice were accepted. Only regular files are read, each byte belongs to
// exactly one tensor, and every name is unique; the refusals name the file.
TEST_F(SafetensorsReader, OnlyRegularFilesAreReadAndNeverBlock) {
  auto refusal = [](const fs::path& p) {
    try {
      jit::safetensors::read(p);
      return std::string("accepted");
    } catch (const jit::Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal("/dev/zero"), "/dev/zero: not a regular file (a character device); safetensors inputs are files");
  const fs::path dir = path_.string() + ".d";
  fs::create_directory(dir);
  EXPECT_NE(refusal(dir).find(dir.string() + ": not a regular file (a directory)"), std::string::npos);
  fs::remove(dir);
  // A FIFO with a writer that never writes: a reader that opened and read it would wait forever,
  // so the check runs in a child that an alarm ends after 10 s.
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(10);
    const int keep_open = ::open(path_.c_str(), O_RDWR);  // the writer
    const std::string got = refusal(path_);
    ::_exit(keep_open >= 0 && got.find(path_.string() + ": not a regular file (a FIFO)") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "blocked on the FIFO until the alarm" : "wrong message");
}

TEST_F(SafetensorsReader, TrailingBytesHolesAndDuplicateNamesAreRefused) {
  const std::string q = R"("q": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]})";
  write("{" + q + "}", std::string(8, 'x') + "appended");
  expect_refused({"8 trailing bytes after the tensors' data"});
  write(R"({"q": {"dtype": "BF16", "shape": [4], "data_offsets": [8, 16]}})", std::string(16, 'x'));
  expect_refused({"data bytes [0, 8) belong to no tensor"});
  write("{" + q + ", " + q + "}", std::string(8, 'x'));
  expect_refused({"duplicate key \"q\""});
  write("{" + q + "}", std::string(8, 'x'));  // the same file without them reads
  EXPECT_EQ(jit::safetensors::read(path_).at("q").bytes, std::string(8, 'x'));
}

}  // namespace
