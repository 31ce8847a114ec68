import sys
# usage: mkpayload.py OUT.S RAM_MIB VCPUS KERNEL [PROG[:arg1,arg2]]...
out, ram, vcpus, kernel, *progs = sys.argv[1:]
lines = ['    .section .rodata', '    .balign 8', '    .globl payload_count', 'payload_count: .long %d' % (1 + len(progs)),
         '    .globl ram_size_mib', '    .balign 8', 'ram_size_mib: .quad %s' % ram, '    .globl vcpus', 'vcpus: .long %s' % vcpus,
         '    .balign 8', '    .globl payload_table', 'payload_table:']
entries = [(kernel, [])] + [(p.split(':')[0], (p.split(':',1)[1].split(',') if ':' in p else [])) for p in progs]
for i, (path, args) in enumerate(entries):
    lines.append('    .quad blob%d, blob%d_end - blob%d, args%d, %d, name%d' % (i, i, i, i, sum(len(a)+1 for a in args), i))
for i, (path, args) in enumerate(entries):
    lines += ['    .balign 16', 'blob%d: .incbin "%s"' % (i, path), 'blob%d_end:' % i]
    lines.append('args%d: ' % i + (''.join('.asciz "%s"\n' % a for a in args) if args else '.byte 0'))
    lines.append('name%d: .asciz "%s"' % (i, path.split('/')[-1]))
open(out, 'w').write('\n'.join(lines) + '\n')
