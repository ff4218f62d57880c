// Prints configs/sluice.yaml ("sluice") or configs/full.yaml ("full") as the code makes them,
// so the checked-in files can be regenerated after a change to the short form or the schema.

#include <cstdio>
#include <cstring>
#include <string>

#include "source/common/config/bootstrap_loader.h"
#include "source/common/config/short_form.h"
#include "source/common/config/yaml_loader.h"

namespace {

constexpr char kFullHeader[] =
    "# sluice configuration, full form: the expansion of configs/sluice.yaml, as\n"
    "# `sluice config expand -c configs/sluice.yaml` prints it. Copy it to add, remove or\n"
    "# reorder filters; this copy is generated (a test compares it with the code):\n"
    "#   bazel run //test/common/config:print_configs -- full > configs/full.yaml\n"
    "# Every field and its default: docs/configuration.md.\n"
    "\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "sluice") != 0 && strcmp(argv[1], "full") != 0)) {
    fprintf(stderr, "usage: print_configs sluice|full\n");
    return 2;
  }
  const std::string short_text =
      sluice::config::initialConfigText(sluice::config::kPlaceholderApiKey);
  if (strcmp(argv[1], "sluice") == 0) {
    fputs(short_text.c_str(), stdout);
    return 0;
  }
  auto bootstrap = sluice::config::loadBootstrapString(short_text, "configs/sluice.yaml");
  if (!bootstrap.ok()) {
    fprintf(stderr, "%s\n", std::string(bootstrap.status().message()).c_str());
    return 1;
  }
  fputs(kFullHeader, stdout);
  fputs(sluice::config::toYaml(*bootstrap).c_str(), stdout);
  return 0;
}
