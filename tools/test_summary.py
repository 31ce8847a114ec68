#!/usr/bin/env python3
"""Sums the test cases of one `bazel test` invocation into one closing line.

Bazel's own summary counts test *targets*; CI wants test *cases*. The test.xml files of exactly
this invocation are taken from its build-event stream (`--build_event_json_file`), so stale logs
of earlier runs (e.g. run_1_of_3 directories) never count, and cached results do. Prints each
failed case, each test target's wall time (slowest first; a result Bazel took from its cache
says so), then `N passed, N failed` (plus `, N skipped` when any), and exits 1 if anything failed
or no test ran. Extra results (e.g. the fuzzer) are added with --extra NAME=pass|fail. With
`bazel test --runs_per_test=N` every run counts, and each target's runs are listed.
"""
import argparse
import json
import pathlib
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def test_results(bep_path):
    """Yields (label, status, test.xml path or None, seconds, cached) for every test run of the
    invocation."""
    with open(bep_path, encoding="utf-8") as bep:
        for line in bep:
            event = json.loads(line)
            if "testResult" not in event.get("id", {}) or "testResult" not in event:
                continue
            label = event["id"]["testResult"]["label"]
            result = event["testResult"]
            xml = None
            for output in result.get("testActionOutput", []):
                if output.get("name") == "test.xml":
                    xml = pathlib.Path(urllib.parse.urlparse(output["uri"]).path)
            seconds = int(result.get("testAttemptDurationMillis", 0)) / 1000
            cached = bool(result.get("cachedLocally") or
                          result.get("executionInfo", {}).get("cachedRemotely"))
            yield label, result.get("status", "NO_STATUS"), xml, seconds, cached


def print_times(times):
    """Each target's wall time, slowest first: seconds per run, and the runs' total."""
    print("== wall time per test target (slowest first)")
    rows = sorted(times.items(), key=lambda kv: -sum(s for s, _, _ in kv[1]))
    for label, runs in rows:
        total = sum(s for s, _, _ in runs)
        cached = all(c for _, c, _ in runs)
        detail = ""
        if len(runs) > 1:
            detail = "  runs: " + " ".join(
                f"{s:.0f}{'' if ok else '(FAILED)'}" for s, _, ok in runs)
        print(f"{total:8.1f} s  {label}{' (cached result)' if cached else ''}{detail}")
    fresh = sum(s for runs in times.values() for s, c, _ in runs if not c)
    print(f"{fresh:8.1f} s  in all, tests run now (targets run in parallel unless exclusive)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bep", type=pathlib.Path, help="build-event JSON file of the bazel test run")
    parser.add_argument("--extra", action="append", default=[],
                        help="NAME=pass|fail: one more result to count")
    args = parser.parse_args()

    passed = failed = skipped = 0
    times = {}
    for label, status, xml, seconds, cached in test_results(args.bep):
        times.setdefault(label, []).append((seconds, cached, status == "PASSED"))
        cases = []
        if xml is not None and xml.exists():
            try:
                cases = list(ET.parse(xml).getroot().iter("testcase"))
            except ET.ParseError as err:
                print(f"FAILED {label}: unreadable test.xml ({err})")
        if not cases:  # crashed, timed out, or wrote no cases: the target is one result
            if status == "PASSED":
                passed += 1
            else:
                print(f"FAILED {label} ({status}, no test cases recorded)")
                failed += 1
            continue
        for case in cases:
            name = f"{label} {case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                print(f"FAILED {name}")
                failed += 1
            elif (case.find("skipped") is not None or case.get("result") == "skipped"
                  or case.get("status") == "notrun"):
                skipped += 1
            else:
                passed += 1
    print_times(times)
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
