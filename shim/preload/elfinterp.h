/*
 * Does an ELF image have a PT_INTERP?  A program without one is
 * statically linked: the loader never runs in it, so no LD_PRELOAD
 * library (the shim) is loaded into it and its I/O is not coordinated.
 *
 * Header-only, raw system calls, the stack only: the library calls it in
 * its exec wrappers (also in a vfork child), the command before it runs
 * CMD.
 */
#ifndef RS_ELFINTERP_H
#define RS_ELFINTERP_H

#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "rawsyscall.h"

static inline int rs_elf_read(int fd, void *buf, long n, uint64_t off)
{
	return rs_sys(SYS_pread64, fd, buf, n, (long)off) == n ? 0 : -1;
}

/* 1: it has one, 0: it has none (static), -1: not ELF or unreadable. */
static inline int rs_elf_has_interp(int fd)
{
	unsigned char id[EI_NIDENT];
	uint64_t phoff;
	unsigned phnum, phentsize;

	if (rs_elf_read(fd, id, sizeof(id), 0) < 0 || memcmp(id, ELFMAG, SELFMAG))
		return -1;
	if (id[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr h;

		if (rs_elf_read(fd, &h, sizeof(h), 0) < 0)
			return -1;
		phoff = h.e_phoff, phnum = h.e_phnum, phentsize = h.e_phentsize;
	} else if (id[EI_CLASS] == ELFCLASS32) {
		Elf32_Ehdr h;

		if (rs_elf_read(fd, &h, sizeof(h), 0) < 0)
			return -1;
		phoff = h.e_phoff, phnum = h.e_phnum, phentsize = h.e_phentsize;
	} else {
		return -1;
	}
	for (unsigned i = 0; i < phnum && i < 4096; i++) {
		uint32_t type;

		/* p_type is the first word of both classes' program headers. */
		if (rs_elf_read(fd, &type, sizeof(type), phoff + (uint64_t)i * phentsize) < 0)
			return -1;
		if (type == PT_INTERP)
			return 1;
	}
	return 0;
}

/* The same for the file at path: 0 static, 1 dynamic, -1 neither. */
static inline int rs_elf_path_has_interp(const char *path)
{
	long fd = rs_sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	int r;

	if (fd < 0)
		return -1;
	r = rs_elf_has_interp((int)fd);
	rs_sys(SYS_close, fd);
	return r;
}

#endif
