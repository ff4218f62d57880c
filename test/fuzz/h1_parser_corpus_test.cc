// Replays the fuzz corpus plus a few thousand seeded mutations of it through the same invariant
// checks as the libFuzzer target, so every CI run (gcc, no libFuzzer) exercises them.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "test/fuzz/h1_parser_fuzz_checks.h"

namespace sluice::http1::fuzz {
namespace {

constexpr char kCorpusDir[] = "test/fuzz/corpus/h1";
constexpr int kMutations = 5000;

std::vector<std::string> loadCorpus() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpusDir)) {
    if (entry.is_regular_file()) {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());  // a stable order keeps the mutations reproducible
  std::vector<std::string> corpus;
  for (const auto& path : paths) {
    std::ifstream file(path, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  return corpus;
}

void run(const std::string& input) {
  checkOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(H1ParserCorpusTest, CorpusFiles) {
  const std::vector<std::string> corpus = loadCorpus();
  ASSERT_GE(corpus.size(), 20u) << "corpus not found under " << kCorpusDir;
  for (const std::string& input : corpus) {
    run(input);
  }
}

// The bytes that move a parser between states.
constexpr char kInteresting[] = {'\r', '\n', ' ',    '\t',   ':',    ',', ';', '=', '"', '\\', '0',
                                 'f',  '\0', '\x7f', '\x80', '\xff', '[', ']', '@', '/', '?',  '#'};

std::string mutate(const std::vector<std::string>& corpus, std::mt19937& rng) {
  std::string s = corpus[rng() % corpus.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 7) {
      case 0:  // overwrite a byte with a random one
        if (pos < s.size()) s[pos] = static_cast<char>(rng() & 0xff);
        break;
      case 1:  // overwrite a byte with a structural one
        if (pos < s.size()) s[pos] = kInteresting[rng() % sizeof(kInteresting)];
        break;
      case 2:  // insert a structural byte
        s.insert(s.begin() + pos, kInteresting[rng() % sizeof(kInteresting)]);
        break;
      case 3:  // delete a short run
        if (pos < s.size()) s.erase(pos, 1 + rng() % 4);
        break;
      case 4: {  // duplicate a slice
        if (pos < s.size()) {
          const std::string slice = s.substr(pos, 1 + rng() % 32);
          s.insert(rng() % (s.size() + 1), slice);
        }
        break;
      }
      case 5: {  // splice in the tail of another input
        const std::string& other = corpus[rng() % corpus.size()];
        if (!other.empty()) {
          s = s.substr(0, pos) + other.substr(rng() % other.size());
        }
        break;
      }
      default:  // truncate
        s.resize(pos);
        break;
    }
  }
  return s;
}

TEST(H1ParserCorpusTest, SeededMutations) {
  const std::vector<std::string> corpus = loadCorpus();
  ASSERT_FALSE(corpus.empty());
  std::mt19937 rng(20240607);
  for (int i = 0; i < kMutations; ++i) {
    run(mutate(corpus, rng));
  }
}

}  // namespace
}  // namespace sluice::http1::fuzz
