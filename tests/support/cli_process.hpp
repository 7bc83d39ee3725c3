// Runs the real fa4jit binary (FA4JIT_CLI, or $FA4JIT_CLI_PATH where the GPU machine runs a
// carried copy) as a child process on a private cache directory and returns its exit status and
// output, for tests of what scripts see.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

namespace jit::testing {

struct CliResult {
  bool exited = false;  // false: ended by a signal
  int rc = -1;          // exit status, -1 when killed by a signal
  std::string out;      // stdout + stderr
};

class CliProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fa4jit_cli_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The binary under test: FA4JIT_CLI, or $FA4JIT_CLI_PATH where the GPU machine runs a copy.
  static std::string cli() {
    const char* carried = std::getenv("FA4JIT_CLI_PATH");
    return carried ? carried : FA4JIT_CLI;
  }
  // `env` is prepended to the command line (e.g. "FA4JIT_SEALED=1 ").
  CliResult run(const std::string& args, const std::string& env = "") const {
    return run_raw(env + " " + cli() + " " + args);
  }
  // Any shell command line (e.g. a `bash -c 'ulimit ...; exec fa4jit ...'`), on the private cache.
  CliResult run_raw(const std::string& command) const {
    const std::string cmd =
        "FA4JIT_CACHE_DIR='" + (dir_ / "cache").string() + "' FA4JIT_CACHE_PATH= FA4JIT_LOG= " + command + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

}  // namespace jit::testing
