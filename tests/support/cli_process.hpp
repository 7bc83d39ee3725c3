// Runs the real fa4jit binary (FA4JIT_CLI, or $FA4JIT_CLI_PATH where the GPU machine runs a
// carried copy) as a child process and returns its exit status and output, for tests of what
// scripts see: CliProcessTest on a private cache directory, run_shell on the environment's cache.
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

// The binary under test: FA4JIT_CLI, or $FA4JIT_CLI_PATH where the GPU machine runs a copy.
inline std::string cli_path() {
  const char* carried = std::getenv("FA4JIT_CLI_PATH");
  return carried ? carried : FA4JIT_CLI;
}

// Runs a shell command line as it is (the environment's cache, FA4JIT_LOG and so on).
inline CliResult run_shell(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class CliProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fa4jit_cli_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string cli() { return cli_path(); }
  // `env` is prepended to the command line (e.g. "FA4JIT_SEALED=1 ").
  CliResult run(const std::string& args, const std::string& env = "") const {
    return run_raw(env + " " + cli() + " " + args);
  }
  // Any shell command line (e.g. a `bash -c 'ulimit ...; exec fa4jit ...'`), on the private cache.
  CliResult run_raw(const std::string& command) const {
    return run_shell("FA4JIT_CACHE_DIR='" + (dir_ / "cache").string() + "' FA4JIT_CACHE_PATH= FA4JIT_LOG= " + command);
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

}  // namespace jit::testing
