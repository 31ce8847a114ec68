#!/usr/bin/env python3
"""Writes the synthetic seeds of tests/fuzz (the real ones -- shipped profiles, snapshots of
running guests, the bundled kernel and a guest program -- are copied in as they are; docs/testing.md).

    tests/fuzz/make_seeds.py SNAPSHOT_DIR   # a snapshot of a guest profiling with LWP

Each seed's first byte is the selector its fuzz target documents.
"""
import json
import gzip
import os
import struct
import zlib
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(corpus, name, data):
    os.makedirs(os.path.join(HERE, corpus), exist_ok=True)
    with open(os.path.join(HERE, corpus, name), "wb") as f:
        f.write(data)


def http_seeds():
    requests = {
        "get_info": b"GET /vm.info HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "put_snapshot": b"PUT /vm.snapshot HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 45\r\n\r\n{\"destination_url\":\"file:///tmp/snapshot-1\"}\n",
        "put_continue": b"PUT /vm.pause HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        "chunked": b"PUT /vm.resume HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "head": b"HEAD /vm.pmu?x=1#f HTTP/1.1\r\nHost: a\r\n\r\n",
        "http09": b"GET /vm.info\r\n",
    }
    for name, text in requests.items():
        write("corpus_http_wire", "request_" + name, b"\x00" + text)
    body = b'{"state":"Running","vcpus":1}'
    answers = {
        "ok": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n%s" % (len(body), body),
        "error": b"HTTP/1.1 409 Conflict\r\nContent-Length: 24\r\n\r\n{\"error\":\"not paused\"}\n",
        "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
        "until_close": b"HTTP/1.0 200 OK\r\n\r\nbody until the server closes",
    }
    for name, text in answers.items():
        write("corpus_http_wire", "answer_" + name, b"\x01" + text)


def api_body_seeds():
    bodies = {  # byte 0: the route's index in vmm/api/api_routes.cc
        "snapshot": b"\x04" + b'{"destination_url":"file:///tmp/snapshot-1"}',
        "migration": b"\x05" + b'{"destination_url":"unix:/tmp/m.sock"}',
        "pause_empty_object": b"\x02{}",
        "pause_no_body": b"\x02",
        "info_with_body": b"\x01x",
        "snapshot_relative": b"\x04" + b'{"destination_url":"file://relative"}',
        "migration_extra_key": b"\x05" + b'{"destination_url":"unix:/m","extra":[1,{"a":null}]}',
    }
    # corpus_api_body/number_overflow is api_body_fuzz's first finding, kept as it was found.
    for name, body in bodies.items():
        write("corpus_api_body", name, body)


def libvirt_seeds():
    write("corpus_libvirt_xml", "amd_lwp",
          b"<cpu mode='custom' match='exact'>\n  <model fallback='forbid'>486</model>\n"
          b"  <vendor>AMD</vendor>\n  <feature policy='require' name='lwp'/>\n"
          b"  <feature policy='require' name='sse4a'/>\n  <feature policy='disable' name='svm'/>\n"
          b"</cpu>\n")
    write("corpus_libvirt_xml", "features_element",
          b"<cpu><model>qemu64</model><features><feature\tpolicy=\"require\" name=\"x2apic\"/>"
          b"</features></cpu>")


def elf(segments, entry):
    """ELF64 x86-64 ET_EXEC; segments: (vaddr, memsz, filesz, flags)."""
    ehsize, phsize = 64, 56
    offset = ehsize + phsize * len(segments)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, entry, ehsize, 0, 0, ehsize, phsize,
                          len(segments), 0, 0, 0)
    phdrs, payload = b"", b""
    for vaddr, memsz, filesz, flags in segments:
        phdrs += struct.pack("<IIQQQQQQ", 1, flags, offset + len(payload), vaddr, vaddr, filesz,
                             memsz, 4096)
        payload += bytes([0xCC]) * filesz
    return header + phdrs + payload


def bzimage(protocol=0x020F, payload=4096):
    b = bytearray(5 * 512 + payload)
    b[0x1F1] = 4
    struct.pack_into("<H", b, 0x1FE, 0xAA55)
    b[0x200:0x202] = b"\xeb\x6a"
    b[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", b, 0x206, protocol)
    b[0x211] = 0x01
    struct.pack_into("<I", b, 0x22C, 0x7FFFFFFF)
    struct.pack_into("<I", b, 0x230, 0x200000)
    b[0x234] = 1
    struct.pack_into("<H", b, 0x236, 0x0003)
    struct.pack_into("<I", b, 0x238, 2047)
    struct.pack_into("<Q", b, 0x258, 0x1000000)
    struct.pack_into("<I", b, 0x260, 0x800000)
    for i in range(5 * 512, len(b)):
        b[i] = (i * 7) & 0xFF
    return bytes(b)


def image_seeds():
    write("corpus_guest_image", "elf_two_segments",
          b"\x00" + elf([(0x100000, 0x2000, 0x1000, 5), (0x103000, 0x3000, 0x100, 6)], 0x100010))
    write("corpus_guest_image", "elf_high", b"\x00" + elf([(0x3FF000, 0x1000, 0x10, 7)], 0x3FF000))
    write("corpus_guest_image", "bzimage", b"\x01" + bzimage())
    write("corpus_guest_image", "bzimage_old_protocol", b"\x01" + bzimage(protocol=0x020B))


def page_walker_seeds():
    """64 KiB of guest RAM holding page tables, then CR3, then (op, linear address) pairs."""
    P, W, U, PS = 1, 2, 4, 0x80

    def tables(entries):
        ram = bytearray(64 * 1024)
        for address, value in entries:
            struct.pack_into("<Q", ram, address, value)
        return bytes(ram)

    def ops(pairs):
        return b"".join(struct.pack("<BQ", op, linear) for op, linear in pairs)

    accesses = ops([(0x07, 0x0), (0x47, 0x1000), (0x87, 0x5000), (0xC7, 0x7FF8), (0x87, 0xFFFF8),
                    (0x00, 0x7FFFFFFFF000), (0x80, 0xFFFF800000000000)])
    four_k = [(0x1000, 0x2000 | P | W | U), (0x2000, 0x3000 | P | W | U), (0x3000, 0x4000 | P | W | U)]
    four_k += [(0x4000 + 8 * i, (i << 12) | P | W | U) for i in range(16)]
    four_k += [(0x4000 + 8 * 7, (7 << 12) | P | U)]  # read-only
    write("corpus_page_walker", "four_k_pages", tables(four_k) + struct.pack("<Q", 0x1000) + accesses)
    two_m = [(0x1000, 0x2000 | P | W | U), (0x2000, 0x3000 | P | W | U), (0x3000, P | W | U | PS)]
    write("corpus_page_walker", "two_m_page_past_ram", tables(two_m) + struct.pack("<Q", 0x1000) + accesses)
    one_g = [(0x1000, 0x2000 | P | W | U), (0x2000, P | W | U | PS)]
    write("corpus_page_walker", "one_g_page", tables(one_g) + struct.pack("<Q", 0x1000) + accesses)
    loop = [(0x1000, 0x1000 | P | W | U), (0x1008, 0xF0000000 | P | W | U)]
    write("corpus_page_walker", "self_reference", tables(loop) + struct.pack("<Q", 0x1000) + accesses)


def message(kind, payload):
    return struct.pack("<BI", kind, len(payload)) + payload


def pages(entries):
    out = struct.pack("<I", len(entries))
    for gpa, fill in entries:
        out += struct.pack("<Q", gpa) + bytes([fill]) * 4096
    return out


def migration_seeds(snapshot):
    with open(os.path.join(snapshot, "manifest.json"), "rb") as f:
        manifest = json.load(f)
    manifest.pop("files", None)  # a hello has none
    manifest["machine"]["mem_mib"] = 16
    hello = json.dumps(manifest).encode()
    with open(os.path.join(snapshot, "state.bin"), "rb") as f:
        state = f.read()
    HELLO, PAGES, STATE = 1, 4, 5
    write("corpus_migration_stream", "whole",
          b"\x00" + message(HELLO, hello) + message(PAGES, pages([(0, 1), (0x5000, 2)]))
          + message(PAGES, pages([(0xFFF000, 3)])) + message(STATE, state))
    write("corpus_migration_stream", "page_outside_ram",
          b"\x00" + message(HELLO, hello) + message(PAGES, pages([(16 << 20, 4)])))
    write("corpus_migration_stream", "raw_tail",
          b"\x01" + message(HELLO, hello) + b"PMUV\x04\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff")
    write("corpus_migration_stream", "hello_only", b"\x00" + message(HELLO, hello))


def block_exactness_seeds():
    """Guests for block_exactness_fuzz: page flags (bit 0-2 present, 3 read-only, 4 supervisor,
    5 XD), the start page and place, 768 bytes of code, 16 registers (even: an address in the
    user pages), RFLAGS, the FS page, the block limit, the slots the guest holds."""
    user = 0x400000

    def reg(address):
        return struct.pack("<Q", (address - user) << 1)

    def guest(flags, start_page, where, code, regs, limit=40, held=0):
        code = code + b"\x90" * 16 + b"\xcc" * (768 - len(code) - 16)
        regs = (regs + [reg(user + 0x5000)] * 16)[:16]
        return (bytes(flags) + bytes([start_page, where]) + code + b"".join(regs) +
                struct.pack("<Q", 0x202) + bytes([5, limit, held]))

    exec_nx = [1, 0x21, 1, 1, 1, 1]  # page 1 not executable
    # add rax,rbx straddling into the non-executable page (offset 4094 of page 0).
    write("corpus_block_exactness", "straddle",
          guest(exec_nx, 0, 1, b"\x48\x01\xd8", []))
    # jmp rax into the non-executable page.
    write("corpus_block_exactness", "jump_nx",
          guest(exec_nx, 0, 200, b"\xff\xe0", [reg(user + 0x1000)]))
    # add rax,1 | mov rbx,[rdi] | add rax,rbx | dec rcx | jnz back; rdi on a supervisor page.
    write("corpus_block_exactness", "load_fault",
          guest([1, 1, 1, 1, 0x11, 1], 0, 200,
                b"\x48\x83\xc0\x01\x48\x8b\x1f\x48\x01\xd8\x48\xff\xc9\x75\xf1",
                [reg(user + 0x5000), reg(user + 0x10), reg(user), reg(user), reg(user),
                 reg(user), reg(user), reg(user + 0x4000)]))
    # xor eax,eax | mov fs,eax | mov rbx,fs:[0x10] | nop
    write("corpus_block_exactness", "segment",
          guest([1] * 6, 2, 200,
                b"\x31\xc0\x8e\xe0\x64\x48\x8b\x1c\x25\x10\x00\x00\x00\x90", []))
    # mov word [rdi],bx over the next instruction (jmp +4 becomes two nops) | jmp +4 | nops
    write("corpus_block_exactness", "self_modifying",
          guest([1] * 6, 1, 200, b"\x66\x89\x1f\xeb\x04\x90\x90\x90\x90\x90",
                [reg(user), reg(user), reg(user), reg(user + 0x9090 % 0x6000), reg(user),
                 reg(user), reg(user), reg(user + 0x1000 + (200 << 4) % 4096 + 3)]))
    # straight-line code off the end of its page into a non-executable one, two slots held.
    write("corpus_block_exactness", "runoff",
          guest(exec_nx, 0, 7, b"\x48\x83\xc0\x01\x48\x83\xc0\x01", [], held=3))


def state_container(sections):
    """A state container (vmm/snapshot/state_sections.h) of (name, bytes) sections."""
    out = b"PMUVMST\0" + struct.pack("<II", 6, len(sections))
    for name, data in sorted(sections):
        crc = zlib.crc32(data, zlib.crc32(name.encode()))
        out += struct.pack("<H", len(name)) + name.encode() + struct.pack("<QI", len(data), crc) + data
    return out


def parse_state_container(data):
    """The (name, bytes) sections of a state container written by state_container() or pmuvm."""
    count = struct.unpack_from("<I", data, 12)[0]
    at, sections = 16, []
    for _ in range(count):
        (name_len,) = struct.unpack_from("<H", data, at)
        name = data[at + 2:at + 2 + name_len].decode()
        at += 2 + name_len
        size, _crc = struct.unpack_from("<QI", data, at)
        at += 12
        sections.append((name, data[at:at + size]))
        at += size
    return sections


def machine_state_seeds():
    """machine_state_fuzz: byte 0 the machine (bits 0-1 profile, 2-3 stepper, 4 Linux, 5 two
    vCPUs), then a container. Seeds: the golden states with their own machines (a state that loads
    whole), the same with the VMM's small sections of vmm_sections() swapped in, and the task map
    over its budget."""
    goldens = {"lwp_kvm": 0x00,          # amd-lwp, kvm, bundled kernel, one vCPU
               "netburst_guest": 0x09}   # intel-netburst, guest-assisted
    small = dict(vmm_sections())
    for name, machine in goldens.items():
        with gzip.open(os.path.join(HERE, "..", "snapshot", "golden", name + ".state.bin.gz")) as f:
            golden = f.read()
        write("corpus_machine_state", name, bytes([machine]) + golden)
        swapped = [(n, small.get(n, data)) for n, data in parse_state_container(golden)]
        write("corpus_machine_state", name + "_small_sections",
              bytes([machine]) + state_container(swapped))
    # The Linux task map claiming 5000 entries (its budget is 4096), with the bytes to hold them:
    # refused by the budget when the count is read, before any entry.
    over = struct.pack("<HQ", 1, 5000) + bytes(5000)
    write("corpus_machine_state", "tasks_over_budget",
          b"\x00" + state_container([("report.linux_tasks", over)]))


def vmm_sections():
    """The VMM's own component sections, small: a component is a u16 version and the archive
    (pmu/state_archive.h): little-endian integers, u64 counts before strings, lists and maps."""
    def string(text):
        return struct.pack("<Q", len(text)) + text

    def event(records, by_rip, untracked):
        out = struct.pack("<QQ", records, len(by_rip))
        for rip, count in by_rip:
            out += struct.pack("<QQ", rip, count)
        return out + struct.pack("<Q", untracked)

    task = (string(b"CR3 0x1000") + struct.pack("<Q", 2)
            + b"\x01" + event(3, [(0x400000, 2), (0x400010, 1)], 0)
            + b"\x02" + event(5, [(0x400020, 1)], 4)
            + struct.pack("<QQQ", 5, 2, 1))
    report = struct.pack("<HQI", 1, 1, 1) + task
    tasks = struct.pack("<HQ", 1, 2) + struct.pack("<QI", 0x1000, 1) + struct.pack("<QI", 0x2000, 2)
    counts = struct.pack("<HQIBQQ", 1, 1000, 1, 0, 2, 0)
    console = struct.pack("<H", 1) + string(b"half a line")
    return [("report.lwp", report), ("report.linux_tasks", tasks), ("vcpu0.counts", counts),
            ("devices.console", console)]


def main():
    http_seeds()
    block_exactness_seeds()
    api_body_seeds()
    page_walker_seeds()
    libvirt_seeds()
    image_seeds()
    machine_state_seeds()
    if len(sys.argv) > 1:
        migration_seeds(sys.argv[1])


if __name__ == "__main__":
    main()
