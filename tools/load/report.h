// The report at the end of a run: wrk/gosst-like text, or one JSON object (--json).
#pragma once

#include "tools/load/options.h"
#include "tools/load/results.h"
#include "tools/load/shared.h"

namespace sluice {
namespace load {

void printText(const Options& o, const Shared& s, const Results& r, double elapsed);
void printJson(const Options& o, const Shared& s, const Results& r, double elapsed);

}  // namespace load
}  // namespace sluice
