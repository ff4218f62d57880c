// Replays the PROXY protocol fuzz corpus plus seeded mutations of it through the same invariant
// checks as the libFuzzer target, so every CI run (gcc, no libFuzzer) exercises them.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/corpus_mutator.h"
#include "test/fuzz/proxy_protocol_fuzz_checks.h"

namespace sluice::network::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/proxy_protocol";
constexpr int kMutations = 200000;
// Commands, families, lengths, separators.
constexpr std::string_view kInteresting("\x00\x01\x02\x11\x12\x21\x31\x20\x21\x22\xff\r\n :", 15);

void run(const std::string& input) {
  checkProxyHeader(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(ProxyProtocolCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_GE(corpus.size(), 8u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) run(input);
}

TEST(ProxyProtocolCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20261201);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::network::fuzz
