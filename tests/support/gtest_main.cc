// main() for every waav gtest binary: gives each test process its own temporary directory
// (ctest runs every TEST in its own process, several at once), so tests that write files under
// testing::TempDir() never collide, and removes it afterwards.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  std::string pattern = (std::filesystem::temp_directory_path() / "waav-test-XXXXXX").string();
  const char* dir = mkdtemp(pattern.data());
  if (dir != nullptr) setenv("TEST_TMPDIR", (std::string(dir) + "/").c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  if (dir != nullptr) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return result;
}
