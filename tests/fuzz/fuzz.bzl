"""One fuzz target, two builds (tests/fuzz/README.md).

A normal build makes `name` a cc_test that runs every checked-in seed through the target's
LLVMFuzzerTestOneInput (replay_main.cc): the seeds are regression inputs of every `bazel test`.
Under `--config=fuzz` (clang, libFuzzer, ASan, UBSan; .bazelrc) the same target is a libFuzzer
binary; tests/fuzz/run_fuzzer.sh builds it there and fuzzes from a copy of the seeds.
"""

def pmuvm_fuzzer(name, srcs, deps, seeds):
    """A libFuzzer target `name` whose seed corpus is the directory `seeds` (in this package)."""
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        data = native.glob([seeds + "/**"]),
        # libFuzzer with -runs=0 only executes the inputs it is given, like replay_main.
        args = select({
            "//tests/fuzz:libfuzzer": ["-runs=0"],
            "//conditions:default": [],
        }) + ["tests/fuzz/" + seeds],
        size = "small",
    )
