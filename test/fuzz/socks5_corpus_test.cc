// Replays the SOCKS5 fuzz corpus plus seeded mutations of it through the same invariant checks
// as the libFuzzer target, so every CI run (gcc, no libFuzzer) exercises them.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/corpus_mutator.h"
#include "test/fuzz/socks5_fuzz_checks.h"

namespace sluice::socks5::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/socks5";
constexpr int kMutations = 200000;
// Versions, methods, commands, address types and lengths.
constexpr std::string_view kInteresting("\x00\x01\x02\x03\x04\x05\x07\x08\x7f\x80\xfe\xff", 12);

void run(const std::string& input) {
  checkSocks5(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(Socks5CorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_GE(corpus.size(), 8u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) run(input);
}

TEST(Socks5CorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20261130);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::socks5::fuzz
