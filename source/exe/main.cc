#include "source/server/cli.h"

int main(int argc, char** argv) { return sluice::server::runCli(argc, argv); }
