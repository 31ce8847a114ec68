"""kvm_host_test: a GoogleTest suite that needs KVM, run on a KVM host on every machine.

The suite is built as a cc_binary and run by an sh_test through tools/kvm-host/run: directly where
/dev/kvm opens, otherwise inside the nested KVM host (QEMU/TCG with AMD SVM, DESIGN.md §4.8), one
boot for the whole suite. The environment travels with it, so GoogleTest writes its per-case XML to
Bazel's XML_OUTPUT_FILE and every case counts in the closing line. When no KVM host can be had the
test fails with the reason (exit 125 from the runner), it never skips.
"""

def kvm_host_test(name, srcs, deps = [], data = [], timeout = "long", vcpus = 1, mem_mib = 4096, **kwargs):
    binary = name + "_suite"
    native.cc_binary(
        name = binary,
        testonly = True,
        srcs = srcs,
        deps = deps,
        data = data,
    )
    native.sh_test(
        name = name,
        srcs = ["//tests:run_in_kvm_host.sh"],
        args = [
            "--vcpus",
            str(vcpus),
            "--mem",
            str(mem_mib),
            "$(rootpath :%s)" % binary,
        ],
        data = [
            ":" + binary,
            "//tools/kvm-host",
        ],
        timeout = timeout,
        # Not sandboxed: the nested host shares the real root filesystem with 9p, so the paths of
        # the runfiles must be the real ones. Not exclusive: a nested host runs QEMU with one TCG
        # thread (tools/kvm-host/README.md), so two suites side by side keep two cores busy, and
        # the suites synchronise on guest progress only, never on wall time.
        tags = ["local"],
        **kwargs
    )
