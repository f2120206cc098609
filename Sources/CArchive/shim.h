#ifndef COVEN_CARCHIVE_SHIM_H
#define COVEN_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#endif
