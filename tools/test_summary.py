#!/usr/bin/env python3
"""Sums the JUnit XML files Bazel writes (bazel-testlogs/**/test.xml) into one closing line.

Bazel's own summary counts test *targets*; CI wants test *cases*. Prints each failed case,
then `N passed, N failed` (plus `, N skipped` when any), and exits 1 if anything failed or no
test ran. Extra results (e.g. the fuzzer) are added with --extra NAME=pass|fail.
"""
import argparse
import pathlib
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("testlogs", type=pathlib.Path)
    parser.add_argument("--extra", action="append", default=[],
                        help="NAME=pass|fail: one more result to count")
    args = parser.parse_args()

    passed = failed = skipped = 0
    for xml in sorted(args.testlogs.glob("**/test.xml")):
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as err:
            print(f"FAILED {xml}: unreadable test.xml ({err})")
            failed += 1
            continue
        cases = list(root.iter("testcase"))
        if not cases:  # a target that crashed before writing cases counts as one failure
            errors = int(root.get("errors", "0") or 0) + int(root.get("failures", "0") or 0)
            if errors:
                print(f"FAILED {xml.parent.relative_to(args.testlogs)} (no test cases recorded)")
                failed += 1
            continue
        for case in cases:
            name = f"{case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                print(f"FAILED {name}")
                failed += 1
            elif case.find("skipped") is not None or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    for extra in args.extra:
        name, _, result = extra.partition("=")
        if result == "pass":
            passed += 1
        else:
            print(f"FAILED {name}")
            failed += 1

    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
