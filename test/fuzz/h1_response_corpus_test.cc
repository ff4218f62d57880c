// Replays the response fuzz corpus plus seeded mutations of it through the same invariant checks
// as the libFuzzer target, so every CI run (gcc, no libFuzzer) exercises them.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/corpus_mutator.h"
#include "test/fuzz/h1_response_fuzz_checks.h"

namespace sluice::http1::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/h1_response";
constexpr int kMutations = 100000;
// The bytes that move the parser and the chunked decoder between states.
constexpr std::string_view kInteresting(
    "\r\n \t:,;=\"\\0f\0\x7f\x80\xff"
    "1",
    17);

void run(const std::string& input) {
  checkResponseStream(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(H1ResponseCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_GE(corpus.size(), 20u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) run(input);
}

TEST(H1ResponseCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20260301);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::http1::fuzz
