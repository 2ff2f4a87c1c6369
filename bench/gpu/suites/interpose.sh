#!/usr/bin/env bash
# The interposer suite (issue 3): tests/gpu/run_interpose.sh prints the RESULT lines.
exec bash "$(dirname "$0")/../../../tests/gpu/run_interpose.sh"
