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
  int rc = -1;      // exit status, -1 when killed by a signal
  std::string out;  // stdout + stderr
};

class CliProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fa4jit_cli_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `env` is prepended to the command line (e.g. "FA4JIT_SEALED=1 ").
  CliResult run(const std::string& args, const std::string& env = "") const {
    const char* carried = std::getenv("FA4JIT_CLI_PATH");
    const std::string cmd = "FA4JIT_CACHE_DIR='" + (dir_ / "cache").string() + "' FA4JIT_CACHE_PATH= FA4JIT_LOG= " +
                            env + " " + (carried ? carried : FA4JIT_CLI) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

}  // namespace jit::testing
