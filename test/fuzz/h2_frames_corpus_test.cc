// Replays the HTTP/2 frame corpus plus seeded mutations of it through the real sluice.http2
// filter, so every CI run (gcc, no libFuzzer) exercises the frame path.

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/corpus_mutator.h"
#include "test/fuzz/h2_frames_fuzz_checks.h"

namespace sluice::http2::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/h2_frames";
constexpr int kMutations = 5000;
// Frame types, flags and lengths that move the session between states.
constexpr std::string_view kInteresting("\x00\x01\x03\x04\x05\x06\x08\x09\x25\xff\x40\x80", 12);

void run(const std::string& input) {
  runFrames(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(H2FramesCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_GE(corpus.size(), 8u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) run(input);
}

TEST(H2FramesCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = sluice::fuzz::loadCorpus({kCorpusDir});
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20261130);
  for (int i = 0; i < kMutations; ++i) run(sluice::fuzz::mutate(corpus, kInteresting, rng));
}

}  // namespace
}  // namespace sluice::http2::fuzz
