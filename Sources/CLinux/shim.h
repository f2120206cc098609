#ifndef COVEN_CLINUX_SHIM_H
#define COVEN_CLINUX_SHIM_H
// Linux calls that Swift's Glibc module does not import (they need _GNU_SOURCE).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sys/vfs.h>
#include <malloc.h>
#include <unistd.h>

// At most `count` malloc arenas (glibc makes one per thread by default, each keeping its own
// freed memory).
static inline int coven_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

// Buffers of at least `bytes` always from mmap, given back to the system when freed. glibc's
// threshold otherwise rises to the largest buffer freed (up to 32 MiB), and the next ones come
// from the heap, whose freed pages it keeps.
static inline int coven_fix_malloc_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

// Starts writeback of a byte range without waiting, so a later fsync has little left to do.
static inline int coven_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE);
}

// O_DIRECT (a _GNU_SOURCE flag): writes straight from the caller's memory to the disk,
// bypassing the page cache.
static inline int coven_o_direct(void) {
    return O_DIRECT;
}

// Allocates the blocks of a byte range about to be written, without changing the file's size,
// so the writes skip the filesystem's per-page delayed allocation (ext4: about a third of a
// write's cost). Not on tmpfs, where allocating means zeroing memory pages that the write then
// fills again (an upload there took 1.24 s instead of 0.90).
static inline int coven_preallocate(int fd, long long offset, long long count) {
    struct statfs info;
    if (fstatfs(fd, &info) == 0 && info.f_type == 0x01021994 /* TMPFS_MAGIC */) return 0;
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, count);
}

// Gives back the blocks of a byte range (it reads as zeros after), without changing the size.
static inline int coven_punch_hole(int fd, long long offset, long long count) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, count);
}

// Writes out every dirty page and inode of the filesystem holding `fd`, and commits its
// journal: one call for a batch of new files, instead of an fsync each (since Linux 5.8 it
// reports the writeback errors of the filesystem, as fsync does a file's).
static inline int coven_syncfs(int fd) {
    return syncfs(fd);
}
#endif
