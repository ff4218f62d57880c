// configs/sluice.yaml and configs/full.yaml are documentation that must match the code. On a
// failure, regenerate them:
//   bazel run //test/common/config:print_configs -- sluice > configs/sluice.yaml
//   bazel run //test/common/config:print_configs -- full > configs/full.yaml

#include <fstream>
#include <sstream>
#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/short_form.h"
#include "source/common/config/yaml_loader.h"

namespace sluice {
namespace config {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// full.yaml minus its leading comment block.
std::string fullYamlBody(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (text[pos] == '#' || text[pos] == '\n')) {
    const size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) return "";
    pos = eol + 1;
  }
  return text.substr(pos);
}

TEST(ConfigsTest, SluiceYamlIsWhatInitWrites) {
  EXPECT_EQ(readFile("configs/sluice.yaml"), initialConfigText(kPlaceholderApiKey))
      << "regenerate configs/sluice.yaml (see the top of this file)";
}

TEST(ConfigsTest, FullYamlIsTheExpansionOfSluiceYaml) {
  absl::StatusOr<v1::Bootstrap> expanded = loadBootstrapFile("configs/sluice.yaml");
  ASSERT_TRUE(expanded.ok()) << expanded.status().message();
  const std::string full = readFile("configs/full.yaml");
  ASSERT_EQ(full.substr(0, 2), "# ") << "full.yaml lost its header comment";
  EXPECT_EQ(fullYamlBody(full), toYaml(*expanded))
      << "regenerate configs/full.yaml (see the top of this file)";
  absl::StatusOr<v1::Bootstrap> loaded = loadBootstrapFile("configs/full.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*loaded, *expanded));
}

}  // namespace
}  // namespace config
}  // namespace sluice
