// Replays the ClientHello fuzz corpus plus seeded mutations of it through the same invariant
// checks as the libFuzzer target, so every CI run (gcc, no libFuzzer) exercises them.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/client_hello_fuzz_checks.h"
#include "test/fuzz/corpus_mutator.h"

namespace sluice::filters::protocol_sniffer::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/client_hello";
constexpr int kMutations = 50000;
// Record and handshake types, versions, length bytes, extension numbers.
constexpr std::string_view kInteresting("\x00\x01\x02\x03\x04\x05\x10\x16\x2b\xff", 10);

void run(const std::string& input) {
  checkClientHello(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(ClientHelloCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_GE(corpus.size(), 4u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) run(input);
}

TEST(ClientHelloCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20261130);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::filters::protocol_sniffer::fuzz
