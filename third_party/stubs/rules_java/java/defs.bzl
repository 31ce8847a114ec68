"""Stub of rules_java's defs.bzl: forwards to Bazel's native Java rules so the build stays offline.

pmuvm has no Java; Bazel 4.2.3's own @bazel_tools load these names while resolving toolchains.
"""

def java_binary(**kwargs):
    native.java_binary(**kwargs)

def java_library(**kwargs):
    native.java_library(**kwargs)

def java_test(**kwargs):
    native.java_test(**kwargs)

def java_import(**kwargs):
    native.java_import(**kwargs)

def java_runtime(**kwargs):
    native.java_runtime(**kwargs)

def java_toolchain(**kwargs):
    native.java_toolchain(**kwargs)

def java_proto_library(**kwargs):
    native.java_proto_library(**kwargs)
