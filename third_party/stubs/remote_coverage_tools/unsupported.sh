#!/bin/sh
echo "coverage through Bazel is not supported in the offline pmuvm build" >&2
exit 1
