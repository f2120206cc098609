#ifndef COVEN_CSQLITE_SHIM_H
#define COVEN_CSQLITE_SHIM_H
// The session extension and the pre-update hook are compiled into Debian's libsqlite3;
// the header declares them only when these are defined.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

// SQLITE_TRANSIENT is a cast of -1 to a function pointer, which Swift cannot import.
static inline sqlite3_destructor_type coven_sqlite_transient(void) { return SQLITE_TRANSIENT; }

// sqlite3_db_config is variadic: one typed wrapper per option we use.
static inline int coven_sqlite_db_config_defensive(sqlite3 *db, int on) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, on, (int *)0);
}

// Names the folder of SQLite's temporary files (process-wide; `folder` from sqlite3_malloc).
// The value before is not freed: a connection on another thread may be reading it.
static inline void coven_sqlite_set_temp_directory(char *folder) {
    sqlite3_temp_directory = folder;
}
#endif
