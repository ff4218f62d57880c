#pragma once

namespace sluice {
namespace server {

// `sluice run|check|init|config expand|status [-c FILE]`, `sluice service enable|disable|status`,
// `sluice --version`. Returns the exit code.
int runCli(int argc, char** argv);

}  // namespace server
}  // namespace sluice
