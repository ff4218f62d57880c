#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::fuzz {

// Reads every regular file of the given folders (workspace-relative), sorted by path so that the
// seeded mutations below are reproducible.
inline std::vector<std::string> loadCorpus(const std::vector<std::string>& dirs) {
  std::vector<std::filesystem::path> paths;
  for (const std::string& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.is_regular_file()) paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> corpus;
  for (const auto& path : paths) {
    std::ifstream file(path, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  return corpus;
}

// A libFuzzer-like mutation of one corpus entry: byte flips, bytes from `interesting`,
// insertions, deletions, duplicated slices, splices with another entry, truncation.
inline std::string mutate(const std::vector<std::string>& corpus, std::string_view interesting,
                          std::mt19937& rng) {
  std::string s = corpus[rng() % corpus.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 7) {
      case 0:
        if (pos < s.size()) s[pos] = static_cast<char>(rng() & 0xff);
        break;
      case 1:
        if (pos < s.size()) s[pos] = interesting[rng() % interesting.size()];
        break;
      case 2:
        s.insert(s.begin() + pos, interesting[rng() % interesting.size()]);
        break;
      case 3:
        if (pos < s.size()) s.erase(pos, 1 + rng() % 4);
        break;
      case 4:
        if (pos < s.size()) {
          const std::string slice = s.substr(pos, 1 + rng() % 32);
          s.insert(rng() % (s.size() + 1), slice);
        }
        break;
      case 5: {
        const std::string& other = corpus[rng() % corpus.size()];
        if (!other.empty()) s = s.substr(0, pos) + other.substr(rng() % other.size());
        break;
      }
      default:
        s.resize(pos);
        break;
    }
  }
  return s;
}

}  // namespace sluice::fuzz
