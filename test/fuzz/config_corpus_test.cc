// Replays the config fuzz corpus (test/fuzz/corpus/config and the shipped configs/*.yaml) plus
// seeded mutations of it through the same checks as the libFuzzer target.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/config_fuzz_checks.h"
#include "test/fuzz/corpus_mutator.h"

namespace sluice::config::fuzz {
namespace {

const std::vector<std::string> kCorpusDirs = {"test/fuzz/corpus/config", "configs"};
constexpr int kMutations = 3000;
// The bytes YAML's structure hangs on.
constexpr std::string_view kInteresting("\n :-[]{},&*!#|>'\"@\t\\?%0\0", 24);

void run(const std::string& input) {
  checkConfigInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(ConfigCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus(kCorpusDirs);
  ASSERT_GE(corpus.size(), 15u) << "corpus not found";
  for (const std::string& input : corpus) run(input);
}

TEST(ConfigCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus(kCorpusDirs);
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20260302);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::config::fuzz
